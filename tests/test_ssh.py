"""check over ssh against real OpenSSH servers on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import fleet_validator, make_venv, run_cli, ssh_check, statuses
from sshd import host, keygen, trust

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def remotes(tmp_path_factory, release):
    """Interpreters on the "remote" side: venvs holding real release trees."""
    base = tmp_path_factory.mktemp("remote")
    hooks = base / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text("print('Welcome to gpu-node-7!  Last login: yesterday')\n")
    return {
        "0.20.1": make_venv(base / "venv-0.20.1", release("0.20.1")),
        "0.33.0": make_venv(base / "venv-0.33.0", release("0.33.0")),
        "noisy": make_venv(base / "venv-noisy", hooks, release("0.33.0")),
        "empty": make_venv(base / "venv-empty"),
    }


def one_line_error(proc, fragment: str) -> None:
    assert "Traceback" not in proc.stderr
    assert fragment in proc.stderr or fragment in proc.stdout, (proc.stdout, proc.stderr)


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.20.1", "0.33.0"])
def test_same_report_as_a_local_check_over_one_connection(version, server, client, remotes, release):
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes[version]), "--format", "json")
    remote = json.loads(proc.stdout)
    local = json.loads(run_cli("check", "--path", str(release(version)), "--format", "json").stdout)
    assert remote["schema"] == "dflash-doctor/check/v2"
    assert remote["target"]["kind"] == "ssh"
    assert remote["target"]["host"] == host(srv) and remote["target"]["python"] == str(remotes[version])
    assert remote["target"]["behaviour"] == f"runs on {host(srv)}"
    # Behaviour runs on the host, so the verdicts are exactly the local ones (0.20.1's raw id read included).
    fields = ("id", "status", "decided_by", "evidence", "structure", "behaviour")
    assert [{k: f[k] for k in fields} for f in remote["fixes"]] == [{k: f[k] for k in fields} for f in local["fixes"]]
    decided = {f["id"]: (f["status"], f["decided_by"]) for f in remote["fixes"]}
    expected = "present" if version == "0.33.0" else "absent"
    assert decided["layer-offset"] == (expected, "behaviour")
    assert decided["swa-config"][0] == expected
    assert remote["engine"] == local["engine"]
    assert proc.returncode == (0 if version == "0.33.0" else 1)
    # One connection: the probe, then each behaviour run in its own exec channel on it.
    assert srv.log_count("Connection from 127.0.0.1") == 1
    assert srv.log_count("request exec") >= 2
    assert srv.log_count("subsystem") == 0


@pytest.mark.release
def test_many_hosts_in_parallel_with_one_broken(server, client, remotes):
    servers = [server(f"sshd{i}") for i in range(3)]
    trust(client, *servers)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    hosts = [host(s) for s in servers] + [dead]
    args = [a for h in hosts for a in ("--host", h)]
    proc = ssh_check(client, *args, "--python", str(remotes["0.33.0"]), "--format", "json", "--jobs", "4")
    assert proc.stdout, proc.stderr
    fleet = json.loads(proc.stdout)
    assert list(fleet_validator().iter_errors(fleet)) == []
    assert fleet["schema"] == "dflash-doctor/fleet/v2"
    assert len(fleet["hosts"]) == 4
    for entry in fleet["hosts"][:3]:
        assert set(statuses(entry).values()) == {"present"}
    assert fleet["hosts"][3]["host"] == dead and "cannot connect" in fleet["hosts"][3]["error"]
    assert proc.returncode == 3
    table = ssh_check(client, *args, "--python", str(remotes["0.33.0"]))
    assert table.returncode == 3 and dead in table.stdout and " PRESENT " in table.stdout


@pytest.mark.release
def test_fleet_sarif_names_each_host_and_the_fleet_ends_with_one_bottom_line(server, client, remotes):
    """A host's SARIF category is the host as given, whether it was checked or could not be (issue 21.7); the
    fleet's JSON and table end with one bottom line over the hosts checked (issue 21.2)."""
    srv = server()
    trust(client, srv)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    args = ["--host", host(srv), "--host", dead, "--python", str(remotes["0.20.1"])]
    runs = json.loads(ssh_check(client, *args, "--format", "sarif").stdout)["runs"]
    assert [run["automationDetails"]["id"] for run in runs] == [
        f"dflash-doctor/ssh:{host(srv)}/",
        f"dflash-doctor/ssh:{dead}/",
    ]
    fleet = json.loads(ssh_check(client, *args, "--format", "json").stdout)
    assert list(fleet_validator().iter_errors(fleet)) == []
    assert fleet["summary"]["text"] == "all three fixes: vLLM 0.33.0 or later"
    assert ssh_check(client, *args).stdout.splitlines()[-1] == "bottom line: all three fixes: vLLM 0.33.0 or later"


@pytest.mark.release
def test_hosts_file_with_comments_and_worst_exit_code(server, client, remotes, tmp_path):
    old, new = server("old"), server("new")
    trust(client, old, new)
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(f"# the fleet\n{host(old)}\n\n{host(new)}  # newest\n")
    proc = ssh_check(client, "--hosts-file", str(hosts_file), "--python", str(remotes["0.20.1"]), "--format", "json")
    fleet = json.loads(proc.stdout)
    assert [h["target"]["host"] for h in fleet["hosts"]] == [host(old), host(new)]
    assert proc.returncode == 1


@pytest.mark.release
def test_unknown_host_key_refused_then_accepted_on_request(server, client, remotes):
    srv = server()
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", f"{srv.host_key}.pub"], capture_output=True, text=True
    ).stdout.split()[1]
    refused = ssh_check(client, "--host", host(srv), "--python", str(remotes["0.33.0"]))
    assert refused.returncode == 3
    one_line_error(refused, "unknown host key")
    assert fingerprint in refused.stderr
    assert not client["known"].exists() or client["known"].read_text() == ""
    accepted = ssh_check(client, "--host", host(srv), "--python", str(remotes["0.33.0"]), "--accept-new-host-key")
    assert accepted.returncode == 0, accepted.stderr
    assert f"[127.0.0.1]:{srv.port}" in client["known"].read_text()
    again = ssh_check(client, "--host", host(srv), "--python", str(remotes["0.33.0"]))
    assert again.returncode == 0


@pytest.mark.release
def test_changed_host_key_is_refused_even_when_accepting_new(server, client, remotes, tmp_path):
    srv = server()
    impostor = keygen(tmp_path / "impostor")
    kind, blob = Path(f"{impostor}.pub").read_text().split()[:2]
    client["known"].write_text(f"[127.0.0.1]:{srv.port} {kind} {blob}\n")
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes["0.33.0"]), "--accept-new-host-key")
    assert proc.returncode == 3
    one_line_error(proc, "host key changed")


@pytest.mark.release
def test_wrong_key_is_an_authentication_failure(server, client, remotes, keys):
    srv = server()
    trust(client, srv)
    client["args"][1] = str(keys["stranger"])
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes["0.33.0"]))
    assert proc.returncode == 3
    one_line_error(proc, "authentication failed")


def test_closed_port(client):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    proc = ssh_check(client, "--host", f"127.0.0.1:{port}")
    assert proc.returncode == 3
    one_line_error(proc, "cannot connect")


def test_silent_server_times_out(client):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    try:
        client["args"][-1] = "1"
        proc = ssh_check(client, "--host", f"127.0.0.1:{listener.getsockname()[1]}")
    finally:
        listener.close()
    assert proc.returncode == 3
    one_line_error(proc, "timed out")


def test_remote_interpreter_missing(server, client):
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", "/nonexistent/bin/python3")
    assert proc.returncode == 3
    one_line_error(proc, "remote interpreter /nonexistent/bin/python3 not found")


@pytest.mark.release
def test_remote_without_vllm(server, client, remotes):
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes["empty"]))
    assert proc.returncode == 3
    one_line_error(proc, "neither vllm nor sglang is installed")
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes["empty"]), "--engine", "vllm")
    assert proc.returncode == 3
    one_line_error(proc, "vllm is not installed")


@pytest.mark.release
def test_junk_before_the_answer_is_ignored(server, client, remotes):
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(remotes["noisy"]), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert set(statuses(json.loads(proc.stdout)).values()) == {"present"}


@pytest.mark.release
def test_ssh_config_alias_and_proxy_jump(server, client, remotes, keys):
    jump, target = server("jump"), server("target")
    trust(client, jump, target)
    config = client["home"] / ".ssh" / "config"
    config.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {jump.port}\n  User root\n  IdentityFile {keys['user']}\n\n"
        f"Host gpu-node\n  HostName 127.0.0.1\n  Port {target.port}\n  User root\n  IdentityFile {keys['user']}\n"
        "  ProxyJump bastion\n"
    )
    env = client["env"]
    proc = run_cli("check", "--host", "gpu-node", "--python", str(remotes["0.33.0"]), "--format", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["target"]["host"] == "gpu-node"
    assert jump.log_count("Connection from 127.0.0.1") == 1
    assert jump.log_count("request exec") == 0  # the jump host only forwards; probe and behaviour run on the target
    assert target.log_count("Connection from 127.0.0.1") == 1 and target.log_count("request exec") >= 2


@pytest.mark.release
def test_a_fleet_behind_one_bastion_shares_one_connection_to_it(server, client, remotes, keys):
    """Three hosts behind one jump host, checked together: one SSH connection to the jump
    host carries them all (as ControlMaster would), so a bastion's MaxStartups is not
    spent on them; each host still gets its own."""
    jump, *targets = server("jump"), server("gpu0"), server("gpu1"), server("gpu2")
    trust(client, jump, *targets)
    config = client["home"] / ".ssh" / "config"
    entries = [f"Host bastion\n  HostName 127.0.0.1\n  Port {jump.port}\n  User root\n  IdentityFile {keys['user']}\n"]
    entries += [
        f"Host gpu{index}\n  HostName 127.0.0.1\n  Port {target.port}\n  User root\n  IdentityFile {keys['user']}\n"
        "  ProxyJump bastion\n"
        for index, target in enumerate(targets)
    ]
    config.write_text("\n".join(entries))
    args = [a for index in range(3) for a in ("--host", f"gpu{index}")]
    proc = run_cli(
        "check", *args, "--python", str(remotes["0.33.0"]), "--format", "json", "--jobs", "3", env=client["env"]
    )
    assert proc.returncode == 0, proc.stderr
    assert [set(statuses(entry).values()) for entry in json.loads(proc.stdout)["hosts"]] == [{"present"}] * 3
    assert jump.log_count("Connection from 127.0.0.1") == 1
    assert all(target.log_count("Connection from 127.0.0.1") == 1 for target in targets)


@pytest.mark.release
def test_probe_script_and_from_probe(server, client, remotes, tmp_path):
    script = run_cli("probe-script")
    assert script.returncode == 0 and script.stdout.startswith("#!/usr/bin/env python3")
    (tmp_path / "probe.py").write_text(script.stdout)
    answers = tmp_path / "answers"
    answers.mkdir()
    for name in ("0.20.1", "0.33.0"):
        out = subprocess.run(
            [str(remotes[name]), str(tmp_path / "probe.py")], capture_output=True, text=True, check=True
        )
        (answers / f"node-{name}.probe").write_text(out.stdout)
    single = run_cli("check", "--from-probe", str(answers / "node-0.33.0.probe"), "--format", "json")
    assert single.returncode == 0
    assert json.loads(single.stdout)["target"]["kind"] == "probe"
    fleet = run_cli("check", "--from-probe", str(answers), "--format", "json")
    hosts = json.loads(fleet.stdout)["hosts"]
    # Probe answers carry no behaviour: 0.20.1's raw read matches only a catch-all form -> unknown, not a guess.
    assert [statuses(h)["layer-offset"] for h in hosts] == ["unknown", "present"]
    assert fleet.returncode == 1
    (answers / "junk.probe").write_text("no probe here\n")
    broken = run_cli("check", "--from-probe", str(answers), "--format", "json")
    errors = {h["host"]: h["error"] for h in json.loads(broken.stdout)["hosts"] if "error" in h}
    assert broken.returncode == 3 and list(errors) == ["junk"] and "did not answer the probe" in errors["junk"]


@pytest.mark.release
def test_ansible_recipe_collects_answers_for_from_probe(server, client, remotes, keys, tmp_path):
    """The recipe in docs/ansible/ run by ansible-core against the test sshd."""
    recipe = Path(__file__).resolve().parent.parent / "docs" / "ansible" / "collect-probes.yml"
    old, new = server("old"), server("new")
    trust(client, old, new)
    work = tmp_path / "ansible"
    work.mkdir()
    (work / "probe.py").write_text(run_cli("probe-script").stdout)
    (work / "answers").mkdir()
    ssh_args = f"-o UserKnownHostsFile={client['known']} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
    lines = ["[gpu]"]
    for name, srv, version in (("node-old", old, "0.20.1"), ("node-new", new, "0.33.0")):
        lines.append(
            f"{name} ansible_host=127.0.0.1 ansible_port={srv.port} ansible_user=root "
            f"ansible_ssh_private_key_file={keys['user']} vllm_python={remotes[version]} "
            f"ansible_python_interpreter={sys.executable} ansible_ssh_common_args='{ssh_args}'"
        )
    (work / "inventory").write_text("\n".join(lines) + "\n")
    # ssh's control sockets in a short directory: a Unix socket path is at most 108 bytes, and pytest's
    # tmp_path grows with its run counter (pytest-1005/...) past it
    control = Path(tempfile.mkdtemp(prefix="cp", dir="/tmp"))
    env = {
        **client["env"],
        "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
    }
    ansible_playbook = Path(sys.executable).parent / "ansible-playbook"
    playbook = subprocess.run(
        [
            str(ansible_playbook),
            "-i",
            "inventory",
            str(recipe),
            "-e",
            f"probe_script={work / 'probe.py'}",
            "-e",
            f"answers_dir={work / 'answers'}",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    shutil.rmtree(control, ignore_errors=True)
    assert playbook.returncode == 0, playbook.stdout + playbook.stderr
    assert sorted(p.name for p in (work / "answers").iterdir()) == ["node-new.probe", "node-old.probe"]
    fleet = run_cli("check", "--from-probe", str(work / "answers"), "--format", "json")
    hosts = json.loads(fleet.stdout)["hosts"]
    assert all("fixes" in h for h in hosts), hosts
    # Probe answers carry no behaviour: 0.20.1's raw read matches only a catch-all form -> unknown, not a guess.
    assert [statuses(h)["layer-offset"] for h in hosts] == ["present", "unknown"]
    assert fleet.returncode == 1


@pytest.mark.release
def test_ancestry_takes_the_commit_from_a_remote_target(server, client, remotes, tmp_path):
    from gitrepos import Repo

    srv = server()
    trust(client, srv)
    repo = Repo.init(tmp_path / "clone")
    repo.commit("Initial import (#1)", {"README.md": "x\n"})
    proc = run_cli(
        "ancestry",
        "--repo",
        str(repo.path),
        "--host",
        host(srv),
        "--python",
        str(remotes["0.33.0"]),
        *client["args"],
        "--format",
        "json",
        env=client["env"],
    )
    # the 0.33.0 wheel records commit 4ba787ec9, which this toy clone does not have
    assert proc.returncode == 3 and "4ba787ec9" in proc.stderr, proc.stderr
