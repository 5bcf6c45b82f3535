"""cache-drop: for ``method="dflash"`` the scheduler must not tell the KV cache
manager (nor the hybrid Mamba chunking) to drop the last matched prefix-cache
block; the chain is predicate -> scheduler -> KV cache manager."""

from . import Dead, Replace, edits

SPEC = "vllm/config/speculative.py"
SCHED = "vllm/v1/core/sched/scheduler.py"

# 0.33.0 (PR #53388 plus the DFlash/DSpark exemption).
NEEDS = "        return self.use_eagle() and not (self.use_dflash() or self.use_dspark())\n"
BLOCK_DROP = "        return self.needs_eagle_block_drop() and not self.disable_eagle_block_drop\n"
SCHED_ASSIGN = "            self.use_eagle_block_drop = speculative_config.use_eagle_block_drop()\n"
SCHED_KW = "            use_eagle=self.use_eagle_block_drop,\n"
MANAGER = "        self.kv_cache_manager = KVCacheManager(\n"
MAMBA = "            request.num_tokens,\n            block_size,\n            self.use_eagle_block_drop,\n"
MAMBA_CALL_END = "            num_hash_lookahead_tokens=self.num_hash_lookahead_tokens,\n        )\n"
NEEDS_DOC_END = '        alone, so only EAGLE/EAGLE3/MTP require the trailing-block drop.\n        """\n'
# Code that never runs (corpus.Dead): a copy of one form beside live code of another.
DEAD_BACKOFF = (
    "            if self.use_eagle:\n                last_cache_position = max(last_cache_position - block_size, 0)\n"
)
DEAD_BACKOFF_EXEMPT = (
    "            if self.use_eagle and not self.vllm_config.speculative_config.use_dflash():\n"
    "                last_cache_position = max(last_cache_position - block_size, 0)\n"
)
DEAD_MANAGER_EXEMPT = (
    "            self.kv_cache_manager = KVCacheManager(\n"
    "                kv_cache_config=kv_cache_config,\n"
    "                use_eagle=self.use_eagle and not self.vllm_config.speculative_config.use_dflash(),\n"
    "            )\n"
)
# 0.30.0 / 0.32.0: the opt-out flag only, DFlash still drops by default.
OPT_OUT = "        return self.use_eagle() and not self.disable_eagle_block_drop\n"


def needs(body: str) -> Replace:
    return Replace(SPEC, NEEDS, body)


def block_drop(body: str) -> Replace:
    return Replace(SPEC, BLOCK_DROP, body)


def opt_out(body: str) -> Replace:
    return Replace(SPEC, OPT_OUT, body)


def scheduler(find: str, replace: str) -> Replace:
    return Replace(SCHED, find, replace)


EDITS = edits(
    "cache-drop",
    # --- semantics-preserving rewrites of 0.33.0 --------------------------------
    (
        "predicate-inlined",
        "0.33.0",
        "preserve",
        "use_eagle_block_drop inlines the exemption instead of calling needs_eagle_block_drop.",
        block_drop(
            "        return (\n"
            "            self.use_eagle()\n"
            "            and not (self.use_dflash() or self.use_dspark())\n"
            "            and not self.disable_eagle_block_drop\n"
            "        )\n"
        ),
    ),
    (
        "eagle-only-tuple",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop lists the methods that drop; use_eagle() minus dflash/dspark is exactly that tuple.",
        needs('        return self.method in ("eagle", "eagle3", "mtp")\n'),
    ),
    (
        "elif-chain",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop as an if/elif chain.",
        needs(
            "        if self.use_dflash():\n"
            "            return False\n"
            "        elif self.use_dspark():\n"
            "            return False\n"
            "        elif self.use_eagle():\n"
            "            return True\n"
            "        return False\n"
        ),
    ),
    (
        "ternary",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop as a conditional expression.",
        needs('        return False if self.method in ("dflash", "dspark") else self.use_eagle()\n'),
    ),
    (
        "not-equal-chain",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop compares the method name directly.",
        needs('        return self.use_eagle() and self.method != "dflash" and self.method != "dspark"\n'),
    ),
    (
        "module-constant",
        "0.33.0",
        "preserve",
        "the exempt methods named in a module constant.",
        Replace(
            SPEC,
            "@config\nclass SpeculativeConfig:",
            "# Drafters that build draft KV from target hidden states alone.\n"
            '_KEEP_TRAILING_BLOCK = frozenset({"dflash", "dspark"})\n\n\n'
            "@config\nclass SpeculativeConfig:",
        ),
        needs("        return self.use_eagle() and self.method not in _KEEP_TRAILING_BLOCK\n"),
    ),
    (
        "predicate-module-helper",
        "0.33.0",
        "preserve",
        "the exemption moved into a module-level helper over the method name.",
        Replace(
            SPEC,
            "@config\nclass SpeculativeConfig:",
            "def _draft_kv_from_target_alone(method: str | None) -> bool:\n"
            '    return method in ("dflash", "dspark")\n\n\n'
            "@config\nclass SpeculativeConfig:",
        ),
        needs("        return self.use_eagle() and not _draft_kv_from_target_alone(self.method)\n"),
    ),
    (
        "manager-kwargs-dict",
        "0.33.0",
        "preserve",
        "the block-drop bit reaches KVCacheManager through a **kwargs dict.",
        scheduler(SCHED_KW, '            **{"use_eagle": self.use_eagle_block_drop},\n'),
    ),
    (
        "manager-local-alias",
        "0.33.0",
        "preserve",
        "the block-drop bit is copied to a local before it is handed to KVCacheManager.",
        scheduler(MANAGER, "        drop_trailing_block = self.use_eagle_block_drop\n" + MANAGER),
        scheduler(SCHED_KW, "            use_eagle=drop_trailing_block,\n"),
    ),
    (
        "predicate-renamed",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop renamed everywhere it is defined and called.",
        Replace(SPEC, "needs_eagle_block_drop", "drafter_needs_block_drop", count=2),
        Replace(SCHED, "needs_eagle_block_drop", "drafter_needs_block_drop"),
    ),
    (
        "flag-early-return",
        "0.33.0",
        "preserve",
        "use_eagle_block_drop checks the opt-out flag first and returns early.",
        block_drop(
            "        if self.disable_eagle_block_drop:\n"
            "            return False\n"
            "        return self.needs_eagle_block_drop()\n"
        ),
    ),
    (
        "not-in-tuple",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop excludes dflash/dspark with `not in`.",
        needs('        return self.use_eagle() and self.method not in ("dflash", "dspark")\n'),
    ),
    (
        "any-generator",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop as any() over the methods that drop.",
        needs('        return any(self.method == name for name in ("eagle", "eagle3", "mtp"))\n'),
    ),
    (
        "scheduler-inlines-predicate",
        "0.33.0",
        "preserve",
        "the scheduler computes use_eagle_block_drop() itself from the same two parts.",
        scheduler(
            SCHED_ASSIGN,
            "            self.use_eagle_block_drop = (\n"
            "                speculative_config.needs_eagle_block_drop()\n"
            "                and not speculative_config.disable_eagle_block_drop\n"
            "            )\n",
        ),
    ),
    (
        "de-morgan",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop with the negation distributed.",
        needs("        return self.use_eagle() and not self.use_dflash() and not self.use_dspark()\n"),
    ),
    (
        "dict-lookup",
        "0.33.0",
        "preserve",
        "needs_eagle_block_drop looks the exempt methods up in a dict, defaulting to use_eagle().",
        needs('        return {"dflash": False, "dspark": False}.get(self.method, self.use_eagle())\n'),
    ),
    (
        "all-tuple",
        "0.33.0",
        "preserve",
        "use_eagle_block_drop as all() over its two conditions (no side effects, same value).",
        block_drop("        return all((self.needs_eagle_block_drop(), not self.disable_eagle_block_drop))\n"),
    ),
    # --- semantics-breaking edits of 0.33.0 --------------------------------------
    # A predicate that is true for DFlash makes 0.33.0 drop the block whenever
    # lookahead block hashes are off (a KV connector, disable_lookahead_block_hashes,
    # no prefix caching); with them on, DFlash's block hashes change instead.
    # Either way the tree no longer does what the fix does.
    (
        "turned-around",
        "0.33.0",
        "break",
        "needs_eagle_block_drop turned around: only the non-EAGLE methods (dflash, dspark) drop.",
        needs('        return self.use_eagle() and self.method not in ("eagle", "eagle3", "mtp")\n'),
    ),
    (
        "scheduler-ignores-predicate",
        "0.33.0",
        "break",
        "the scheduler stops using the exemption predicate: use_eagle() and the opt-out flag only.",
        scheduler(
            SCHED_ASSIGN,
            "            self.use_eagle_block_drop = (\n"
            "                speculative_config.use_eagle()\n"
            "                and not speculative_config.disable_eagle_block_drop\n"
            "            )\n",
        ),
    ),
    (
        "manager-told-use-eagle",
        "0.33.0",
        "break",
        "KVCacheManager is handed use_eagle (true for DFlash) instead of the block-drop bit.",
        scheduler(SCHED_KW, "            use_eagle=self.use_eagle,\n"),
    ),
    (
        "missing-method",
        "0.33.0",
        "break",
        "the exemption calls a method SpeculativeConfig does not have: the scheduler cannot be built.",
        needs("        return self.use_eagle() and not (self.use_dflash_drafter() or self.use_dspark())\n"),
    ),
    (
        "getattr-missing-method",
        "0.33.0",
        "break",
        "the exemption looks up a method that does not exist with a getattr default: never exempt.",
        needs('        return self.use_eagle() and not getattr(self, "is_dflash", lambda: False)()\n'),
    ),
    (
        "returns-early",
        "0.33.0",
        "break",
        "needs_eagle_block_drop returns use_eagle() before the exemption.",
        needs("        return self.use_eagle()\n" + NEEDS),
    ),
    (
        "elif-wrong-order",
        "0.33.0",
        "break",
        "the elif chain tests use_eagle() first, so the exemption is never reached.",
        needs(
            "        if self.use_eagle():\n"
            "            return True\n"
            "        elif self.use_dflash() or self.use_dspark():\n"
            "            return False\n"
            "        return False\n"
        ),
    ),
    (
        "ternary-inverted",
        "0.33.0",
        "break",
        "the conditional expression has its branches swapped: only dflash/dspark drop.",
        needs('        return self.use_eagle() if self.method in ("dflash", "dspark") else False\n'),
    ),
    (
        "opt-out-only",
        "0.33.0",
        "break",
        "use_eagle_block_drop back to the opt-out flag alone: DFlash drops by default.",
        block_drop("        return self.use_eagle() and not self.disable_eagle_block_drop\n"),
    ),
    (
        "scheduler-forces-dflash",
        "0.33.0",
        "break",
        "the scheduler turns the drop back on for DFlash after reading the predicate.",
        scheduler(
            SCHED_ASSIGN,
            SCHED_ASSIGN
            + "            self.use_eagle_block_drop = self.use_eagle_block_drop or speculative_config.use_dflash()\n",
        ),
    ),
    (
        "manager-or-use-eagle",
        "0.33.0",
        "break",
        "KVCacheManager is told to drop when either bit is set; use_eagle is set for DFlash.",
        scheduler(SCHED_KW, "            use_eagle=self.use_eagle_block_drop or self.use_eagle,\n"),
    ),
    (
        "use-dflash-misspelt",
        "0.33.0",
        "break",
        "use_dflash() compares against a misspelt method name, so the exemption never applies.",
        Replace(
            SPEC,
            '    def use_dflash(self) -> bool:\n        return self.method == "dflash"\n',
            '    def use_dflash(self) -> bool:\n        return self.method == "d-flash"\n',
        ),
    ),
    (
        "tuple-lists-dflash",
        "0.33.0",
        "break",
        "the methods that drop, listed with dflash among them.",
        needs('        return self.method in ("eagle", "eagle3", "mtp", "dflash")\n'),
    ),
    (
        "or-instead-of-and",
        "0.33.0",
        "break",
        "`or` for `and`: every EAGLE-style method, DFlash included, drops.",
        needs("        return self.use_eagle() or not (self.use_dflash() or self.use_dspark())\n"),
    ),
    (
        "mamba-backoff-use-eagle",
        "0.33.0",
        "break",
        "hybrid Mamba chunking backs off a block on use_eagle (true for DFlash) instead of the block-drop bit.",
        scheduler(MAMBA, "            request.num_tokens,\n            block_size,\n            self.use_eagle,\n"),
    ),
    (
        "predicate-not-called",
        "0.33.0",
        "break",
        "the scheduler takes the truth of the bound method, not its result: always drop.",
        scheduler(
            SCHED_ASSIGN, "            self.use_eagle_block_drop = bool(speculative_config.use_eagle_block_drop)\n"
        ),
    ),
    # --- code that never runs beside live code (issue 19 item 2) ----------------
    (
        "dead-backoff-use-eagle",
        "0.33.0",
        "preserve",
        "the old back-off on use_eagle kept under `if False:` beside the live one on the block-drop bit.",
        Dead(
            SCHED,
            MAMBA + MAMBA_CALL_END,
            "        if False:  # before the block-drop predicate\n" + DEAD_BACKOFF,
            DEAD_BACKOFF,
        ),
    ),
    (
        "dead-backoff-exempts-dflash",
        "0.33.0",
        "break",
        "the back-off hands use_eagle to the checkpoint position; a DFlash exemption sits under `while 0:`.",
        scheduler(MAMBA, "            request.num_tokens,\n            block_size,\n            self.use_eagle,\n"),
        Dead(
            SCHED,
            "            self.use_eagle,\n" + MAMBA_CALL_END,
            "        while 0:  # DFlash exempt, some day\n" + DEAD_BACKOFF_EXEMPT,
            DEAD_BACKOFF_EXEMPT,
        ),
    ),
    (
        "dead-exemption",
        "0.33.0",
        "break",
        "needs_eagle_block_drop returns use_eagle(); the exemption sits under `if 0:` before it.",
        needs("        return self.use_eagle()\n"),
        Dead(SPEC, NEEDS_DOC_END, "        if 0:\n    " + NEEDS, "    " + NEEDS),
    ),
    # --- the exemption added, in other styles, to trees with the opt-out flag only -------
    (
        "add-method-compare",
        "0.30.0",
        "add",
        "0.30.0 use_eagle_block_drop exempts method 'dflash' by name.",
        opt_out('        return self.use_eagle() and self.method != "dflash" and not self.disable_eagle_block_drop\n'),
    ),
    (
        "add-early-return",
        "0.30.0",
        "add",
        "0.30.0 use_eagle_block_drop returns False for DFlash first.",
        opt_out("        if self.use_dflash():\n            return False\n" + OPT_OUT),
    ),
    (
        "add-method-tuple",
        "0.30.0",
        "add",
        "0.30.0 use_eagle_block_drop lists the methods that drop (use_eagle()'s tuple without dflash).",
        opt_out(
            '        return self.method in ("eagle", "eagle3", "mtp", "dspark") and not self.disable_eagle_block_drop\n'
        ),
    ),
    (
        "add-ternary",
        "0.30.0",
        "add",
        "0.30.0 use_eagle_block_drop as a conditional expression on use_dflash().",
        opt_out(
            "        return False if self.use_dflash() else self.use_eagle() and not self.disable_eagle_block_drop\n"
        ),
    ),
    (
        "add-helper-predicate",
        "0.30.0",
        "add",
        "0.30.0 with a new predicate for drafters that keep the target's KV, used by use_eagle_block_drop.",
        Replace(
            SPEC,
            "    def use_eagle_block_drop(self) -> bool:\n",
            "    def keeps_trailing_block(self) -> bool:\n"
            '        """DFlash builds its draft KV from target hidden states alone."""\n'
            '        return self.method == "dflash"\n\n'
            "    def use_eagle_block_drop(self) -> bool:\n",
        ),
        opt_out(
            "        return self.use_eagle() and not (self.keeps_trailing_block() or self.disable_eagle_block_drop)\n"
        ),
    ),
    (
        "add-elif-chain",
        "0.32.0",
        "add",
        "0.32.0 use_eagle_block_drop as an elif chain exempting DFlash.",
        opt_out(
            "        if self.disable_eagle_block_drop:\n"
            "            return False\n"
            '        elif self.method == "dflash":\n'
            "            return False\n"
            "        return self.use_eagle()\n"
        ),
    ),
)

# Dead code on the route behaviour reads: the manager construction the scheduler hands its flag
# to (behaviour/handed.py folds the last live one).
EDITS += edits(
    "cache-drop",
    (
        "dead-manager-exempts-dflash",
        "0.33.0",
        "break",
        "KVCacheManager is handed bool(use_eagle); a DFlash-exempt construction sits under `if False:` before it.",
        scheduler(SCHED_KW, "            use_eagle=bool(self.use_eagle),\n"),
        Dead(
            SCHED,
            "        self.hash_block_size = hash_block_size\n",
            "        if False:  # the DFlash exemption, off\n" + DEAD_MANAGER_EXEMPT,
            DEAD_MANAGER_EXEMPT,
        ),
    ),
)
