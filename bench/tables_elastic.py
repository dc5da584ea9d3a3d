#!/usr/bin/env python3
"""Markdown tables of bench/elastic.sh's results (docs/data/elastic.jsonl, or the file named),
stdlib only: the overhead of --elastic without failures, and the recovery of each fault plan."""
import json
import statistics
import sys
from pathlib import Path

from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "elastic.jsonl"


def main():
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    rows = [json.loads(l) for l in data.read_text().splitlines() if l.strip()]
    epochs = lambda run: [r for r in rows if r["run"] == run and K.epoch in r
                          and "event" not in r and not r.get("step_log")]
    plain, elastic, auto = epochs("plain"), epochs("elastic"), epochs("elastic-auto")
    plain_fragments, elastic_fragments = epochs("plain-fragments"), epochs("elastic-fragments")
    elastic_delay = epochs("elastic-fragments-delay")
    sps = lambda rs: [r[K.samples_per_s] for r in rs]
    print("| run | outer codec | samples/s (rounds) | mean | test acc % |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, rs in (("DiLoCo", plain), ("DiLoCo --elastic", elastic),
                     ("DiLoCo --elastic, auto", auto), ("DiLoCo, fragments", plain_fragments),
                     ("DiLoCo --elastic, fragments", elastic_fragments),
                     ("DiLoCo --elastic, fragments, --sync-delay", elastic_delay)):
        if not rs:
            continue
        codecs = sorted({r.get("outer_codec", "") for r in rs})
        print(f"| {name} | {', '.join(codecs)} | {' / '.join(f'{x:.0f}' for x in sps(rs))} | "
              f"{statistics.mean(sps(rs)):.0f} | "
              f"{100 * statistics.mean(r[K.test_acc] for r in rs):.2f} |")
    def ratio(name, top, bottom):  # each round runs both in turn
        if top and bottom:
            pairs = [a / b for a, b in zip(sps(top), sps(bottom))]
            print(f"{name}: {statistics.mean(sps(top)) / statistics.mean(sps(bottom)):.3f}"
                  f" (round by round: {' / '.join(f'{x:.2f}' for x in pairs)})")
    print()
    ratio("--elastic / plain", elastic, plain)
    ratio("--elastic fragments / --elastic", elastic_fragments, elastic)
    ratio("--elastic fragments / plain fragments", elastic_fragments, plain_fragments)
    ratio("--elastic fragments with the delay / --elastic", elastic_delay, elastic)
    ratio("--elastic fragments with the delay / without", elastic_delay, elastic_fragments)
    if auto:
        print(f"--elastic auto / --elastic rot:tile:2: "
              f"{statistics.mean(sps(auto)) / statistics.mean(sps(elastic)):.3f}")
    recovery = ("kill-inner", "kill-exchange", "kill-mid")
    if not any(r["run"] in recovery for r in rows):
        return
    print()
    print("| fault plan | kill to the view without it (s) | kill to the failed exchange (s) | "
          "exchange start to failure (s) | deciding the view (s) | rebuilding the group (s) | "
          "joiner: asking to enter to training (s) | entered mid-round | "
          "of which the wait for its view (s) | connect (s) | state transfer (s) | state bytes | "
          "round with the join / median round |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in recovery:
        evs = [r for r in rows if r["run"] == run and "event" in r]
        redo = [r for r in evs if r["event"] == "redo"]
        joined = [r for r in evs if r["event"] == "joined"]
        entered = [r for r in evs if r["event"] == "entered" and r["replica"] >= 100]
        steps = [r for r in rows if r["run"] == run and r.get("step_log")]
        med = statistics.median(r["round_s"] for r in steps) if steps else 0
        # At a boundary the members' "joined" row has the transfer; mid-round, the joiner's
        # handover (its connect included) is its own row's transfer_s.
        join_round = joined[0]["round"] if joined else entered[0]["round"] if entered else None
        transfer = joined or entered
        with_join = [r["round_s"] for r in steps if r["round"] == join_round]
        cell = lambda rs, key: (f"{statistics.median(r[key] for r in rs):.3f}"
                                if rs and all(key in r for r in rs) else "")
        print(f"| {run} | {cell(redo, 'kill_to_view_s')} | {cell(redo, 'kill_to_abort_s')} | "
              f"{cell(redo, 'failed_after_s')} | {cell(redo, 'decide_s')} | "
              f"{cell(redo, 'rebuild_s')} | {cell(entered, 'enter_s')} | "
              f"{'yes' if entered and all(r.get('mid_round') for r in entered) else 'no'} | "
              f"{cell(entered, 'view_s')} | {cell(entered, 'connect_s')} | "
              f"{cell(transfer, 'transfer_s')} | {joined[0].get('bytes', '') if joined else ''} | "
              f"{f'{with_join[0] / med:.2f}x' if with_join and med else ''} |")


if __name__ == "__main__":
    main()
