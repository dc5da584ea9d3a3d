#!/usr/bin/env bash
# The measurements on the text demo task (scripts/make-text-demo.py: Debian's
# fortunes as a CoLA-format task): a small RoBERTa (4 layers, hidden 128, 4 heads,
# 64 tokens), 2 ranks on loopback, batch 32.
#   codecs   U-shape f2l2, 4 chunks: none and sortquant:16/12/8/4 (the codec ablation)
#   modes    samples/s of one process, a 2-rank pipeline (linear, 4 chunks) and 2-rank DDP
#            (pipeline against data parallel)
# Results: JSON lines in out/bench/text/*.jsonl (docs/data/text-*.jsonl: the recorded run);
# the tables: python3 bench/tables_text.py DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-build/dtrain}
OUT=${OUT:-out/bench/text}
EPOCHS=${EPOCHS:-3}
mkdir -p "$OUT"
[ -f data/fortunes/train.tsv ] || python3 scripts/make-text-demo.py
common=(--model roberta --layers 4 --hidden 128 --heads 4 --dataset glue --task cola
        --data-dir data/fortunes --max-seq-len 64 --optimizer adamw --lr 3e-4 --weight-decay 0.01
        --lr-schedule linear --warmup-epochs 0.1 --epochs "$EPOCHS" --seed 1
        --quiet)
sections=${*:-codecs modes}
for s in $sections; do
  case $s in
    codecs)
      rm -f "$OUT/codecs.jsonl"
      for codec in none sortquant:16 sortquant:12 sortquant:8 sortquant:4; do
        echo "U-shape f2l2, $codec" >&2
        "$DTRAIN" train "${common[@]}" --batch-size 32 -n 2 --parallel pipeline --placement ushape \
          --client-blocks 2,2 --chunks 4 --compress "$codec" --metrics "$OUT/run.jsonl"
        cat "$OUT/run.jsonl" >> "$OUT/codecs.jsonl"
      done ;;
    modes)
      rm -f "$OUT/modes.jsonl"
      "$DTRAIN" train "${common[@]}" --batch-size 32 --metrics "$OUT/run.jsonl"
      cat "$OUT/run.jsonl" >> "$OUT/modes.jsonl"
      "$DTRAIN" train "${common[@]}" --batch-size 32 -n 2 --parallel pipeline --chunks 4 --metrics "$OUT/run.jsonl"
      cat "$OUT/run.jsonl" >> "$OUT/modes.jsonl"
      "$DTRAIN" train "${common[@]}" -n 2 --parallel ddp --batch-size 16 --metrics "$OUT/run.jsonl"
      cat "$OUT/run.jsonl" >> "$OUT/modes.jsonl" ;;
    *) echo "unknown section $s (codecs, modes)" >&2; exit 2 ;;
  esac
done
python3 bench/tables_text.py "$OUT"
