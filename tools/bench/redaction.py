"""Redaction through the server on the demo model: recall and precision per policy.

Spoken sentences (espeak-ng) each say one value, and the policies whose definition
covers it are known (a card's 8 digits are `pci` and `numbers`; "$42.50" is `numbers`;
"$120", "3:30 PM" and plain words are none). For each policy a server runs with
`--redact POLICY` alone, every sentence is uploaded to its file API (`json`), and its text
is judged: a sentence the policy covers is caught when the policy's placeholder is in the
text and none of the value's digits or words are left; the placeholder on a sentence the
policy does not cover is a false alarm. recall = caught / sentences covered; precision =
placeholders on covered sentences / all its placeholders.

The set: 18 hand-written sentences, then 122 held-out sentences of every kind the demo
model was taught (`tools/demo_model/pii_texts.py`, a seed no training uses; `--seed`
draws a fresh set), among them cards read in groups of four with pauses, in a sentence
and as a bare utterance of digits alone. What the model mishears shows as misses here:
the measurement is the whole path, model included.

The command line is scripts/bench_redaction.py.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.redaction.policies import Policy
from tools.bench.capacity.corpus import default_speech_dir
from tools.bench.common.cli import add_json, parser_for
from tools.bench.common.output import machine, write_json
from tools.demo_model import pii_texts
from tools.spawn import ServerSpec, spawn
from tools.speech import synthesize

REPO = Path(__file__).resolve().parents[2]
POLICIES = ("pci", "ssn", "phone", "email", "numbers")
RECALL_FLOOR, PRECISION_FLOOR = 0.95, 0.90  # issue 41's bars


@dataclass(frozen=True, slots=True)
class Case:
    """A sentence as spoken, the policies whose definition covers what it says (none: a
    negative for every policy), and the digits or words the output must not keep."""

    spoken: str
    policies: frozenset[str]
    secret: tuple[str, ...]
    said: str = ""  # what the synthesiser is given, when not `spoken` (pauses in a card)


def case(spoken: str, policies: str, *secret: str, said: str = "") -> Case:
    return Case(spoken, frozenset(policies.split()), secret, said)


#: `numbers` covers every value of 4 or more digits, whatever else it is (an amount too).
HAND_CASES: tuple[Case, ...] = (
    case("the last digits of the card are four one one one one one one one", "pci numbers",
         "41111111"),
    case("the last digits of the card are five five five five four four", "pci numbers",
         "555544"),
    case("my card number is four one one one one one one one one one one one one one one one",
         "pci numbers", "4111"),
    case("the card expires on the twelfth of may, the code is one two three", "pci", "123"),
    case("my social security number is one two three four five six seven eight nine",
         "ssn numbers", "123456789"),
    case("can you call me back at five five five one two three four five six seven",
         "phone numbers", "5551234567"),
    case("my phone number is two zero two five five five zero one one nine", "phone numbers",
         "2025550119"),
    case("my email is jane dot doe at example dot com", "email", "jane", "example"),
    case("your reference number is nine seven five four three", "numbers", "97543"),
    case("your order number is four two one nine", "numbers", "4219"),
    case("my account number is eight eight one two three four", "numbers", "881234"),
    case("your balance is forty two dollars and fifty cents", "numbers", "4250"),
    case("your contract ends on january twenty fifth, twenty twenty seven", "numbers", "2027"),
    case("the total comes to one hundred and twenty dollars", ""),
    case("your appointment is at three thirty p m", ""),
    case("the price went up by fifteen percent", ""),
    case("thank you for calling, how can i help you today", ""),
    case("please hold the line", ""),
)  # fmt: skip


#: The policies that cover each kind of `pii_texts` sentence (a card read in halves, an
#: expiry and a code are the card's, and only `pci` knows them as such).
KIND_POLICIES = {
    "card": "pci numbers",
    "card_half": "pci numbers",
    "expiry": "pci",
    "code": "pci",
    "phone": "phone numbers",
    "ssn": "ssn numbers",
    "email": "email",
    "card_groups": "pci numbers",
    "card_bare": "pci numbers",
}
#: Generated sentences per kind: 20 where a policy has one kind, so one miss is 95 %.
KIND_COUNTS = {
    "card": 16, "card_half": 8, "expiry": 10, "code": 8, "phone": 20, "ssn": 20, "email": 20,
    "card_groups": 10, "card_bare": 10,
}  # fmt: skip
#: Never a training seed (tools/demo_model trains on seeds 1 and 2).
CASE_SEED = 4141


def generated_cases(seed: int = CASE_SEED) -> tuple[Case, ...]:
    """Held-out sentences of every kind the demo model was taught (`pii_texts`), with the
    value's digit groups or words as the secrets."""
    rng, out = random.Random(seed), list[Case]()
    for kind, count in KIND_COUNTS.items():
        drawn = 0
        while drawn < count:
            pii = pii_texts.pii_sentence(rng, kind)
            if not pii.sentence.held_out:
                continue
            values = re.findall(r"\d+/\d+|[^\W_]+", " ".join(pii.values))
            policies = KIND_POLICIES[kind]
            out.append(case(pii.sentence.spoken, policies, *values, said=pii.sentence.said))
            drawn += 1
    return tuple(out)


def all_cases(seed: int = CASE_SEED) -> tuple[Case, ...]:
    """The benchmark set: the hand-written sentences, then the generated ones."""
    return HAND_CASES + generated_cases(seed)


def placeholder(policy: str) -> str:
    return Policy(policy).placeholder


def caught(text: str, case: Case, policy: str) -> bool:
    """`policy` redacted the case: its placeholder there, none of the secrets left."""
    return placeholder(policy) in text and not any(_left(s, text) for s in case.secret)


def _left(secret: str, text: str) -> bool:
    """Whether `secret` shows in `text`: a word as a word (not "mail" in "[EMAIL]"),
    digits however they are grouped ("4250" in "$42.50")."""
    if secret.isalpha():
        return re.search(rf"\b{re.escape(secret)}\b", text, re.IGNORECASE) is not None
    flat = text.replace(" ", "").replace("-", "").replace(".", "")
    return secret.replace("-", "").replace(".", "") in flat


def score(policy: str, rows: Sequence[tuple[Case, str]]) -> dict[str, Any]:
    """Recall and precision of one policy over (case, redacted text) pairs."""
    mine = [(c, t) for c, t in rows if policy in c.policies]
    hits = sum(caught(t, c, policy) for c, t in mine)
    marked = [(c, t) for c, t in rows if placeholder(policy) in t]
    right = sum(policy in c.policies for c, _ in marked)
    recall = hits / len(mine) if mine else None
    precision = right / len(marked) if marked else None
    return {
        "policy": policy,
        "sentences": len(mine),
        "caught": hits,
        "recall": recall,
        "marked": len(marked),
        "precision": precision,
        "passes": recall is not None
        and precision is not None
        and recall >= RECALL_FLOOR
        and precision >= PRECISION_FLOOR,
    }


def upload(http_url: str, wav: Path) -> str:
    """The file API's text for one recording."""
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    body = head + wav.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        http_url + "/v1/audio/transcriptions",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return str(json.loads(answer.read())["text"])


def run_policy(model: Path, policy: str, wavs: Sequence[Path]) -> list[str]:
    """Every recording's text from a server that redacts `policy` alone."""
    options = ("--model", str(model), "--workers", "1", "--redact", policy)
    server = spawn(ServerSpec(options, cwd=REPO, start_timeout_s=300.0))
    try:
        return [upload(server.http_url, wav) for wav in wavs]
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "demo")
    parser.add_argument("--voice", default="en-us")
    parser.add_argument(
        "--seed",
        type=int,
        default=CASE_SEED,
        help="the generated sentences' seed: another gives a fresh set to confirm on",
    )
    add_json(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    speech = default_speech_dir()
    cases = all_cases(args.seed)
    wavs = [synthesize(c.said or c.spoken, args.voice, speech) for c in cases]
    results, texts = [], {}
    for policy in POLICIES:
        redacted = run_policy(args.model, policy, wavs)
        texts[policy] = redacted
        results.append(score(policy, list(zip(cases, redacted, strict=True))))
        print(json.dumps(results[-1]), flush=True)
    report = {
        "config": {
            "model": str(args.model),
            "voice": args.voice,
            "seed": args.seed,
            "policies": list(POLICIES),
        },
        "machine": machine("cpus", "platform", "cpu", "python"),
        "policies": results,
        "sentences": [
            {
                "spoken": c.spoken,
                "policies": sorted(c.policies),
                "texts": {p: texts[p][i] for p in POLICIES},
            }
            for i, c in enumerate(cases)
        ],
        "run_s": round(time.perf_counter() - started, 1),
    }
    write_json(args.json, report)
    return 0
