#!/usr/bin/env python3
r"""Compare lm-evaluation-harness and Arbiter on one lm-eval task and filter (stdlib only);
used by scripts/peer-check/lm-eval.

Inputs
  --lm-log          proxy.py log of lm-eval's requests
  --lm-samples      lm-eval's samples_<task>_<ts>.jsonl (written by --log_samples)
  --lm-filter       which of lm-eval's filter pipelines to take verdicts from
  --other-log       proxy.py log of Arbiter's requests
  --other-verdicts  `arbiter export --format csv` of Arbiter's run (case_id, verdict)
  --summary         write the counts as JSON here (for the driver's table)

Each logged completions request is paired with the evaluated item whose question
(doc["question"]) ends latest in its prompt (the few-shot questions come earlier). Paired
prompts must be identical; the other body fields and the completions are shown for
information. Verdicts: lm-eval's per-item exact_match against Arbiter's verdict for the same
case id (doc["id"]); "pass"/"fail" count, anything else (uncertain, error) is a mismatch.

Exit status: 0 when every prompt is identical and every verdict agrees, 1 otherwise.
"""
import argparse
import csv
import difflib
import json
import sys
from collections import OrderedDict

QUESTION_FIELD = "question"
ID_FIELD = "id"
PROMPT_FIELDS = {"prompt", "messages"}


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prompt_of(body):
    if not isinstance(body, dict):
        return None
    if "prompt" in body:
        p = body["prompt"]
        if isinstance(p, list) and len(p) == 1:
            p = p[0]
        return p if isinstance(p, str) else json.dumps(p, ensure_ascii=False)
    if "messages" in body:
        msgs = body["messages"]
        if isinstance(msgs, list) and len(msgs) == 1 and isinstance(msgs[0], dict) \
                and msgs[0].get("role") == "user" and isinstance(msgs[0].get("content"), str):
            return msgs[0]["content"]
        return json.dumps(msgs, ensure_ascii=False)
    return None


def completion_of(resp):
    try:
        ch = resp["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if "text" in ch:
        return ch["text"]
    return (ch.get("message") or {}).get("content")


def prompt_records(path):
    recs = []
    for r in read_jsonl(path):
        p = prompt_of(r.get("body"))
        if p is not None:
            recs.append({"prompt": p, "body": r["body"], "completion": completion_of(r.get("response")),
                         "seq": r.get("seq")})
    return recs


def load_samples(path, lm_filter):
    items = OrderedDict()
    for s in read_jsonl(path):
        if lm_filter and s.get("filter") != lm_filter:
            continue
        key = s["doc_id"]
        if key in items:
            continue
        doc = s.get("doc", {})
        args = s.get("arguments", {})
        first = next(iter(args.values()), {}) if isinstance(args, dict) else (args[0] if args else {})
        prompt = first.get("arg_0") if isinstance(first, dict) else (first[0] if first else None)
        em = s.get("exact_match")
        if em is None:
            em = next((v for k, v in s.items() if k.startswith("exact_match")), None)
        items[key] = {
            "doc_id": key,
            "id": str(doc.get(ID_FIELD, key)),
            "question": doc.get(QUESTION_FIELD),
            "prompt": prompt,
            "exact_match": em,
            "filtered": s.get("filtered_resps"),
            "raw": s["resps"][0][0] if s.get("resps") else None,
            "target": s.get("target"),
            "filter": s.get("filter"),
        }
    return list(items.values())


def pair_key(prompt, items):
    best, best_end, best_len = None, -1, -1
    for it in items:
        q = it["question"]
        if not q:
            continue
        pos = prompt.rfind(q)
        if pos < 0:
            continue
        end = pos + len(q)
        if end > best_end or (end == best_end and len(q) > best_len):
            best, best_end, best_len = it["doc_id"], end, len(q)
    return best


def index_requests(recs, items):
    """doc_id -> first request for it; plus the unpaired requests and the repeat count."""
    out, unpaired, dup = OrderedDict(), [], 0
    for r in recs:
        k = pair_key(r["prompt"], items)
        if k is None:
            unpaired.append(r)
        elif k in out:
            dup += 1
        else:
            out[k] = r
    return out, unpaired, dup


def show(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def short_diff(a, b, context=40, max_lines=12):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    lines = [f"    first difference at char {i} (lm-eval len {len(a)}, arbiter len {len(b)}):",
             f"      lm-eval: …{show(a[max(0, i - context):i + context])}…",
             f"      arbiter: …{show(b[max(0, i - context):i + context])}…"]
    d = list(difflib.unified_diff([show(x) for x in a.split("\n")], [show(x) for x in b.split("\n")],
                                  "lm-eval", "arbiter", n=0, lineterm=""))
    lines += ["      " + l for l in d[:max_lines]]
    if len(d) > max_lines:
        lines.append(f"      … {len(d) - max_lines} more diff lines")
    return "\n".join(lines)


def load_arbiter_verdicts(path):
    """case_id -> "pass" | "fail" | other, from `arbiter export --format csv` (first row per case)."""
    out = OrderedDict()
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["case_id"], (row.get("verdict") or "").strip().lower())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm-log", required=True)
    ap.add_argument("--lm-samples", required=True)
    ap.add_argument("--lm-filter")
    ap.add_argument("--other-log", required=True)
    ap.add_argument("--other-verdicts", required=True)
    ap.add_argument("--summary")
    ap.add_argument("--max-diffs", type=int, default=5, help="prompt diffs to print in full")
    a = ap.parse_args()

    items = load_samples(a.lm_samples, a.lm_filter)
    if not items:
        sys.exit(f"{a.lm_samples}: no samples for filter {a.lm_filter!r}")
    by_doc = {it["doc_id"]: it for it in items}
    lm_score = sum(float(i["exact_match"] or 0) for i in items) / len(items)
    print(f"lm-eval samples: {len(items)} items (filter {items[0]['filter']!r}), exact_match mean {lm_score:.4f}")

    # prompts
    lm_recs, other_recs = prompt_records(a.lm_log), prompt_records(a.other_log)
    lm_p, _, _ = index_requests(lm_recs, items)
    ot_p, ot_unp, ot_dup = index_requests(other_recs, items)
    print(f"prompt requests: lm-eval log {len(lm_recs)}, arbiter log {len(other_recs)}")
    bad = [d for d, r in lm_p.items() if by_doc[d]["prompt"] is not None and r["prompt"] != by_doc[d]["prompt"]]
    if bad:  # sanity: lm-eval's logged bodies are the prompts its samples file says it built
        print(f"  WARNING: {len(bad)} lm-eval request bodies differ from the samples file's arguments")

    def label(k):
        return f"{by_doc[k]['id']} (doc_id {k})"

    keys = [k for k in lm_p if k in ot_p]
    only_lm = [k for k in lm_p if k not in ot_p]
    only_ot = [k for k in ot_p if k not in lm_p]
    same = [k for k in keys if lm_p[k]["prompt"] == ot_p[k]["prompt"]]
    diff = [k for k in keys if k not in same]
    print("\n== prompts (paired by question) ==")
    print(f"paired {len(keys)}; identical {len(same)}; different {len(diff)}; "
          f"only in lm-eval log {len(only_lm)}; only in arbiter log {len(only_ot)}; "
          f"unpaired arbiter requests {len(ot_unp)}; repeated arbiter requests {ot_dup}")
    for k in diff[: a.max_diffs]:
        print(f"  DIFFERENT {label(k)}:")
        print(short_diff(lm_p[k]["prompt"], ot_p[k]["prompt"]))
    if len(diff) > a.max_diffs:
        print(f"  … and {len(diff) - a.max_diffs} more: " + ", ".join(label(k) for k in diff[a.max_diffs:]))
    for k in only_lm:
        print(f"  only lm-eval: {label(k)}")
    for k in only_ot:
        print(f"  only arbiter: {label(k)}")
    for r in ot_unp[:3]:
        print(f"  unpaired arbiter request (seq {r['seq']}): {show(r['prompt'][-120:])}")
    prompts_ok = not diff and not only_lm and not only_ot and len(keys) == len(items)

    # the other request fields (information only: e.g. Arbiter asks for logprobs)
    print("\n== other request fields (lm-eval vs arbiter) ==")
    field_diffs = {}
    for k in keys:
        lb, ob = lm_p[k]["body"], ot_p[k]["body"]
        for f in sorted((set(lb) | set(ob)) - PROMPT_FIELDS):
            if lb.get(f, "<absent>") != ob.get(f, "<absent>"):
                field_diffs.setdefault(f, set()).add((json.dumps(lb.get(f, "<absent>")),
                                                      json.dumps(ob.get(f, "<absent>"))))
    if keys and not field_diffs:
        print("  all identical: " + ", ".join(sorted(set(lm_p[keys[0]]["body"]) - PROMPT_FIELDS)))
    for f, vals in field_diffs.items():
        for lv, ov in sorted(vals)[:3]:
            print(f"  {f}: lm-eval {lv}  arbiter {ov}")

    # completions (same server, greedy: identical prompts should give identical text)
    both = [k for k in keys if lm_p[k]["completion"] is not None and ot_p[k]["completion"] is not None]
    if both:
        same_c = [k for k in both if lm_p[k]["completion"] == ot_p[k]["completion"]]
        print(f"\n== completions == identical {len(same_c)}/{len(both)}")
        for k in [k for k in both if k not in same_c][: a.max_diffs]:
            print(f"  {label(k)}: lm-eval \"{show(lm_p[k]['completion'])}\"  arbiter \"{show(ot_p[k]['completion'])}\"")

    print("\n== lm-eval per-item exact_match ==")
    for it in items:
        print(f"  {it['id']:<16} em={float(it['exact_match'] or 0):.0f} target={it['target']!r:<8} "
              f"filtered={it['filtered']!r} raw=\"{show(it['raw'] or '')}\"")

    # verdicts
    other = load_arbiter_verdicts(a.other_verdicts)
    print(f"\n== verdicts (arbiter: {len(other)} cases) ==")
    agree = 0
    for it in items:
        lmv = "pass" if float(it["exact_match"] or 0) > 0 else "fail"
        ov = other.get(it["id"])
        if ov == lmv:
            agree += 1
        elif ov is None:
            print(f"  MISSING   {it['id']}: lm-eval {lmv}, no row in Arbiter's export")
        else:
            print(f"  DISAGREE  {it['id']}: lm-eval {lmv} (filtered {it['filtered']!r}, "
                  f"target {it['target']!r}), arbiter {ov!r}")
    extra = [k for k in other if k not in {it["id"] for it in items}]
    if extra:
        print(f"  Arbiter cases lm-eval did not evaluate: {', '.join(extra)}")
    print(f"agree {agree}/{len(items)}")
    arbiter_score = sum(v == "pass" for v in other.values()) / len(other) if other else 0.0
    verdicts_ok = agree == len(items) and not extra

    ok = prompts_ok and verdicts_ok
    if a.summary:
        with open(a.summary, "w", encoding="utf-8") as f:
            json.dump({"items": len(items), "prompts_identical": len(same), "verdicts_agree": agree,
                       "lm_score": lm_score, "arbiter_score": arbiter_score, "ok": ok}, f)
    print("\nRESULT:", "MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
