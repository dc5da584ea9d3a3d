#!/usr/bin/env python3
"""The text demo task: a real two-class text classification from Debian's `fortunes`
package, written as a GLUE CoLA-format task with a byte-level BPE vocabulary trained on
its training split.

Task: is a fortune cookie from the "computers" file (label 1) or the "people" file
(label 0)? Fortunes longer than --max-chars are left out; every fifth one (in file order)
goes to dev. Output, in OUT (default data/fortunes):
  train.tsv, dev.tsv   CoLA's four tab-separated columns: source, label, mark, sentence
  vocab.json, merges.txt   byte-level BPE (GPT-2's byte symbols) with RoBERTa's specials

usage: make-text-demo.py [--fortunes DIR] [--out OUT] [--merges N] [--max-chars N]
"""
import argparse
import collections
import json
import os
import re
import sys

TOPICS = {"computers": 1, "people": 0}


def byte_symbols():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                 + list(range(0xAE, 0x100)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def read_fortunes(path, max_chars):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for block in text.split("\n%\n"):
        sentence = " ".join(block.replace("\t", " ").split())
        if sentence and sentence != "%" and len(sentence) <= max_chars:
            out.append(sentence)
    return out


# GPT-2's pieces, close enough for learning merges (the tokenizer itself is in C++).
PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def train_bpe(sentences, merges_wanted):
    symbols = byte_symbols()
    words = collections.Counter()
    for s in sentences:
        for piece in PIECES.findall(s):
            words[tuple(symbols[b] for b in piece.encode("utf-8"))] += 1
    words = {w: c for w, c in words.items()}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for w, c in words.items():
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += c
            where[(a, b)].add(w)
    merges = []
    while len(merges) < merges_wanted and pairs:
        best, count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 2:
            break
        merges.append(best)
        for w in list(where.pop(best, ())):
            if w not in words:
                continue
            c = words.pop(w)
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] -= c
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
            merged, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    merged.append(w[i] + w[i + 1])
                    i += 2
                else:
                    merged.append(w[i])
                    i += 1
            merged = tuple(merged)
            words[merged] = words.get(merged, 0) + c
            for a, b in zip(merged, merged[1:]):
                pairs[(a, b)] += c
                where[(a, b)].add(merged)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for b in range(256):
        vocab[symbols[b]] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="data/fortunes")
    ap.add_argument("--merges", type=int, default=4000)
    ap.add_argument("--max-chars", type=int, default=400)
    args = ap.parse_args()
    rows = []
    for topic, label in TOPICS.items():
        path = os.path.join(args.fortunes, topic)
        if not os.path.exists(path):
            sys.exit(f"missing {path}: install Debian's fortunes package (scripts/install-deps.sh)")
        rows += [(topic, label, s) for s in read_fortunes(path, args.max_chars)]
    train = [r for i, r in enumerate(rows) if i % 5 != 4]
    dev = [r for i, r in enumerate(rows) if i % 5 == 4]
    os.makedirs(args.out, exist_ok=True)
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            for topic, label, s in split:
                f.write(f"{topic}\t{label}\t\t{s}\n")
    vocab, merges = train_bpe([s for _, _, s in train], args.merges)
    with open(os.path.join(args.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(args.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    print(f"{args.out}: {len(train)} train, {len(dev)} dev examples "
          f"({sum(r[1] for r in train)} computers), {len(vocab)} tokens")


if __name__ == "__main__":
    main()
