#!/bin/sh
# Gate a deploy on dflash-doctor: run before rolling vLLM out to the GPU fleet.
#
#   DFLASH_DOCTOR_TARGET   where vLLM is, as check options (default: --host "$GPU_HOST")
#   DFLASH_DOCTOR_WAIVERS  optional waivers file (accepted gaps, each with a reason)
#
# Writes dflash-doctor.sarif (code scanning) and dflash-doctor.xml (JUnit);
# exits non-zero when the deploy must not go ahead.
set -u

target=${DFLASH_DOCTOR_TARGET:-"--host ${GPU_HOST:?set GPU_HOST or DFLASH_DOCTOR_TARGET}"}

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
