#!/usr/bin/env bash
# The one device entry point: runs a named study on the GPU machine, from the repository root.
#   bash experiments/device/run.sh STUDY [ARGS...]     (bash experiments/device/run.sh list)
# The studies are the lines of experiments/device/STUDIES (name, script, arguments); each is
# described in experiments/README.md. run.sh sources the device environment (env.sh: the
# `subgpu.commands` entry point, PYTHONPATH, the optional .whl/ wheels), defines the helpers
# below and sources the study's script with ARGS as its positional parameters. Output goes
# under $OUT (the device call's folder; /tmp/device_out when unset). An unknown study or a
# missing one: the table on stderr, exit 2.
set -uo pipefail
DEVICE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STUDY_TABLE="$DEVICE_DIR/STUDIES"

list_studies() { grep -v '^#' "$STUDY_TABLE" | grep -v '^[[:space:]]*$' \
  | awk '{ a = ""; for (i = 3; i <= NF; i++) a = a " " $i; printf "  %-15s%s\n", $1, a }'; }

STUDY=${1:-}
if [ -z "$STUDY" ] || [ "$STUDY" = list ]; then
  echo "usage: run.sh STUDY [ARGS...]; studies (experiments/README.md):" >&2
  list_studies >&2
  [ "$STUDY" = list ] && exit 0 || exit 2
fi
SCRIPT=$(awk -v s="$STUDY" '$1 == s && $1 !~ /^#/ { print $2 }' "$STUDY_TABLE")
if [ -z "$SCRIPT" ]; then
  echo "run.sh: unknown study '$STUDY'; studies (experiments/README.md):" >&2
  list_studies >&2
  exit 2
fi
shift
STUDY_USAGE="usage: run.sh $STUDY$(awk -v s="$STUDY" '$1 == s { for (i = 3; i <= NF; i++) printf " %s", $i }' "$STUDY_TABLE")"

# -- helpers for the studies ---------------------------------------------------------------
# need_args N ARGS...: fewer than N arguments: the study's usage line on stderr, exit 2.
need_args() { local n=$1; shift; [ $# -ge "$n" ] || { echo "$STUDY_USAGE" >&2; exit 2; }; }
# need_out: creates $OUT (a study calls it once its arguments are checked).
need_out() { mkdir -p "$OUT" || { echo "run.sh: OUT must be a folder that can be created, got '$OUT'" >&2; exit 2; }; }
# workdir NAME: a scratch folder /tmp/NAME for the study's files (kept between calls while the
# machine stays warm, so a killed call can resume), in $D; creates $OUT too.
workdir() { need_out; D=/tmp/$1; mkdir -p "$D"; }
# bundle NAME: $D packed into $OUT/NAME.tgz.
bundle() { tar czf "$OUT/$1.tgz" -C "$D" .; }
# quiet: a filter that drops the libraries' warning lines.
quiet() { grep --line-buffered -v -i warn; }
# workload_flags W: the `subgpu search/tune` flags of a workload of experiments/hw_verdicts_h200.py
# that the tune studies take (two where SubGPU won on the H200, two where it did not), in $F.
workload_flags() {
  case "$1" in
    llama70b_tp8_g2048_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 2048 --kv-history 1024 --input-len 1024";;
    llama70b_tp8_g1536_kv1k) F="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --batches 1536 --kv-history 1024 --input-len 1024";;
    llama8b_1gpu_g256_kv2k)  F="--model llama-3.1-8b --gpus 1 --tp 1 --dp 1 --batches 256 --kv-history 2048 --input-len 2048";;
    qwen3_8b_1gpu_g32_kv16k) F="--model qwen3-8b --gpus 1 --tp 1 --dp 1 --batches 32 --kv-history 16384 --input-len 16384";;
    *) echo "run.sh $STUDY: unknown workload '$1' (llama70b_tp8_g2048_kv1k, llama70b_tp8_g1536_kv1k, llama8b_1gpu_g256_kv2k, qwen3_8b_1gpu_g32_kv16k)" >&2; exit 2;;
  esac
}
# The llama-3.1-70b TP8 deployments of the measured winners (`subgpu run` flags).
L2048="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 2048 --input-len 1024 --kv-history 1024 --hardware H200"
L1024="--model llama-3.1-70b --gpus 8 --tp 8 --dp 1 --ep 1 --batch 1024 --input-len 2048 --kv-history 2048 --hardware H200"
# The committed calibrations of those winners (tuned GEMMs).
TUNED=experiments/results/hw_wins/tuned
# -------------------------------------------------------------------------------------------

OUT=${OUT:-/tmp/device_out}
source "$DEVICE_DIR/env.sh"
source "$DEVICE_DIR/$SCRIPT"
