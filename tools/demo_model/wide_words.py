"""Sentences with slot values from a wide vocabulary, so the demo model learns to spell.

The base sentences (`texts.py`) fill their name, city, team and thing slots from a few
dozen words, and a model trained on them only can write those words and nothing else:
it cannot spell a name it never heard, so hotword biasing has nothing to choose from.
Here the slots take real words from longer lists and made-up words built of syllables
(the letter-to-sound rules of espeak-ng and flite say them as they are spelt), so the
model learns pieces rather than words.

`HOTWORD_TEST_VALUES` are never yielded: the hotword benchmark (tools/bench/hotwords.py)
measures recall on them, so they must stay unheard.
"""

from __future__ import annotations

import random
import re

from tools.demo_model import texts

#: Slot values kept out of all training: the hotword benchmark's phrases. The second
#: part of each list (from Mirabel, Ljubljana, invoicing, stapler on) came with the open
#: vocabulary (issue 53): words in none of its lists, so no data set ever held them.
HOTWORD_TEST_VALUES: dict[str, tuple[str, ...]] = {
    "name": ("Martin", "Sandra", "Carla", "Derek", "Lisa", "Nina", "Oscar", "Felix", "Rita",
             "Simon", "Tina", "Mirabel", "Cosima", "Lysander", "Isolde", "Tamsin", "Anselm",
             "Florimel"),
    "city": ("Austin", "Dallas", "Oslo", "Lisbon", "Munich", "Perth", "Ljubljana", "Marrakesh",
             "Valparaiso", "Bratislava"),
    "team": ("finance", "marketing", "security", "travel", "invoicing", "provisioning",
             "escalations", "payables"),
    "thing": ("laptop", "ticket", "voucher", "parcel", "printer", "modem", "tablet", "license",
              "stapler", "wheelbarrow", "humidifier", "lanyard"),
}  # fmt: skip


#: Real words for the slots, beyond the base sentences' (none of HOTWORD_TEST_VALUES).
def _listed(text: str, sep: str = " ") -> tuple[str, ...]:
    return tuple(text.split(sep))


REAL: dict[str, tuple[str, ...]] = {
    "name": _listed(
        "Adam Alice Amber Andrew Angela Arthur Barbara Benjamin Bella Carlos Caroline Charles "
        "Chloe Christopher Claire Daisy Dennis Diana Edward Elena Eric Ethan Fiona Frank "
        "George Gordon Hannah Harry Henry Isabel Ivan Jack Jason Jessica Joseph Karen Kate "
        "Leon Lucas Lucy Luke Matthew Megan Molly Nathan Nicole Oliver Pamela Patrick Paula "
        "Rachel Rebecca Ryan Samuel Steven Susan Teresa Victor Walter Wendy William Yvonne "
        "Dorothy Gabriel Harold Irene Justin Leonard Marcus Miriam Norman Philip Roland"
    ),
    "city": _listed(
        "Atlanta Amsterdam Barcelona Bristol Brussels Cairo Calgary Cardiff Dakar Detroit "
        "Edinburgh Florence Geneva Glasgow Hamburg Helsinki Houston Istanbul Jakarta Kingston "
        "Leeds Lima Liverpool Manila Melbourne Miami Milan Montreal Nairobi Naples Orlando "
        "Ottawa Phoenix Portland Prague Rome Santiago Stockholm Tampa Tokyo Vienna Warsaw "
        "Valencia Hanover Memphis Nashville Oxford Seville"
    ),
    "team": _listed(
        "legal|payroll|shipping|returns|claims|service|product|research|design|planning"
        "|customer care|quality|sales support|onboarding|retention",
        "|",
    ),
    "thing": _listed(
        "bill|charger|camera|headset|keyboard|monitor|speaker|warranty|coupon|receipt|parking"
        "|insurance|mortgage|loan|pension|membership|upgrade|sim card|broadband|cable|bundle"
        "|voicemail|handset|gift card|statement|deposit|transfer|balance|profile|login"
        "|battery|screen|mouse|scanner|projector|adapter|kettle|fridge|heater|blender",
        "|",
    ),
}

ONSETS = _listed(
    "b c d f g h j k l m n p r s t v w br cl cr dr fl fr gl gr pl pr sl sm sn sp st tr sh ch th"
)
NUCLEI = _listed("a e i o u a e i o ai ea oo ee ou")
CODAS = ["", "", "", "n", "r", "l", "s", "t", "m", "x", "nd", "st", "rk", "ck", "ng"]

#: Share of a wide slot's values that are made up rather than from `REAL`.
MADE_UP_SHARE = 0.5


def made_up_word(rng: random.Random) -> str:
    """A pronounceable word of two or three syllables, lowercase."""
    syllables = rng.choice((2, 2, 3))
    return "".join(
        rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS) for _ in range(syllables)
    )


def says_held(text: str) -> bool:
    """Whether `text` says a hotword benchmark value, or a word it begins ("parcels",
    "Martinez", "financed" would teach most of its spelling)."""
    held = tuple(v.lower() for values in HOTWORD_TEST_VALUES.values() for v in values)
    return any(word.startswith(held) for word in re.findall(r"[a-z']+", text.lower()))


def _held(slot: str, value: str) -> bool:
    """Whether `value` could be a benchmark value (or holds one as a word)."""
    return any(
        re.search(rf"\b{re.escape(kept.lower())}\b", value.lower())
        for kept in HOTWORD_TEST_VALUES[slot]
    )


def wide_value(slot: str, rng: random.Random) -> texts.Fill:
    """A (written, spoken) value for `slot` from the wide vocabulary."""
    while True:
        if rng.random() < MADE_UP_SHARE:
            word = made_up_word(rng)
            value = word.capitalize() if slot in ("name", "city") else word
        else:
            value = rng.choice(REAL[slot])
        if not _held(slot, value):
            return value, value.lower()


def wide_sentence(rng: random.Random) -> texts.Sentence:
    """A base template with a wide slot; its other slots filled as the base sentences do."""
    template = rng.choice([t for t in texts.TEMPLATES if any(f"{{{s}}}" in t for s in REAL)])
    fills = {}
    for name in re.findall(r"{(\w+)}", template):
        fills[name] = wide_value(name, rng) if name in REAL else texts.SLOTS[name](rng)
    written = template.format(**{k: w for k, (w, _) in fills.items()})
    spoken = template.format(**{k: s for k, (_, s) in fills.items()})
    return texts.Sentence(written, texts.spoken_words(spoken))
