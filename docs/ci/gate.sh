#!/bin/sh
# Gate a deploy on dflash-doctor: run before rolling vLLM out to the GPU fleet.
#
#   GPU_HOST                    the host to check, [user@]host[:port]
#   DFLASH_DOCTOR_TARGET        or where vLLM is, as check options (default: --host "$GPU_HOST")
#   DFLASH_DOCTOR_WAIVERS       optional waivers file (accepted gaps, each with a reason)
#   DFLASH_DOCTOR_REQUIREMENTS  the pinned install (default .dflash-doctor/requirements.txt:
#                               the wheel and its dependencies, each with its sha256); set it
#                               empty to use the dflash-doctor already on PATH (an image that has it)
#
# Installs dflash-doctor into the Python on PATH from the pinned requirements (hash-checked),
# writes dflash-doctor.sarif (code scanning) and dflash-doctor.xml (JUnit), and exits with
# dflash-doctor's code: 0 deploy, 1 a fix is missing, 2 a fix is unknown, 3 the check could not run.
set -u

if [ -n "${DFLASH_DOCTOR_TARGET:-}" ]; then
  target=$DFLASH_DOCTOR_TARGET
elif [ -n "${GPU_HOST:-}" ]; then
  target="--host $GPU_HOST"
else
  echo "dflash-doctor: the check could not run: set GPU_HOST or DFLASH_DOCTOR_TARGET: not deploying" >&2
  exit 3
fi

requirements=${DFLASH_DOCTOR_REQUIREMENTS-.dflash-doctor/requirements.txt}
if [ -n "$requirements" ] && ! python3 -m pip install --quiet --require-hashes --only-binary :all: -r "$requirements" >&2; then
  echo "dflash-doctor: the check could not run: cannot install the pinned dflash-doctor from $requirements: not deploying" >&2
  exit 3
fi

# $target is split into words on purpose: it holds options.
# shellcheck disable=SC2086
dflash-doctor check $target \
  --format sarif --output dflash-doctor.sarif \
  --output junit=dflash-doctor.xml \
  ${DFLASH_DOCTOR_WAIVERS:+--waivers "$DFLASH_DOCTOR_WAIVERS"}
code=$?

case $code in
  0) echo "dflash-doctor: every DFlash fix is present (or waived): deploy" ;;
  1) echo "dflash-doctor: a DFlash fix is missing: not deploying (see dflash-doctor.sarif)" >&2 ;;
  2) echo "dflash-doctor: a fix could not be decided (unknown): not deploying; the reason in dflash-doctor.sarif says what to look at" >&2 ;;
  *) echo "dflash-doctor: the check could not run (exit $code): not deploying" >&2 ;;
esac
exit "$code"
