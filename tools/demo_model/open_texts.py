"""Open-vocabulary sentences, so the demo model learns English spelling rather than a list.

The base sentences (`texts.py`) and the wide slot values (`wide_words.py`) teach a few
hundred words; a caller says anything. Here the words come from lists that packages ship:
the commonest English words in frequency order (`wordfreq`), first names, surnames, street
and city parts (`faker`'s en_US providers). Six kinds of sentence:

- `words`: a run of 2 to 9 words, half drawn by frequency, half evenly from the whole list;
- `names`: people, streets, towns and companies in call-centre frames;
- `numbers`: digits read every way a caller reads them (one by one, in groups with pauses,
  as pairs, "double five", "triple oh", "oh" for zero), half of them bare utterances with
  no word around them;
- `email`: addresses as people say them ("j smith twelve at gmail dot com");
- `spelled`: a name, then its letters one by one;
- `slots`: the base templates with a slot value from the open lists.

The lists hold no hotword benchmark value nor a word that begins with one
(`wide_words.says_held`), and the caller (`dataset._drawn`) drops held-out sentences and
any that says such a word, as for every other kind.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tools.demo_model import texts, wide_words

#: How many of the commonest words the lists take.
WORD_COUNT = 40000
#: The shares of the kinds, in order (they sum to 1).
KIND_SHARES: tuple[tuple[str, float], ...] = (
    ("words", 0.30),
    ("names", 0.18),
    ("numbers", 0.18),
    ("email", 0.10),
    ("spelled", 0.09),
    ("slots", 0.15),
)
#: How the synthesisers must be given a spelled letter: "a" alone is the article to them.
LETTER_SAID = {"a": "ay"}


@dataclass(frozen=True, slots=True)
class Lexicon:
    """The lists the sentences draw from (none holds a held word)."""

    words: tuple[str, ...]  # commonest first
    first_names: tuple[str, ...]
    surnames: tuple[str, ...]
    street_suffixes: tuple[str, ...]
    city_parts: tuple[tuple[str, ...], tuple[str, ...]]  # prefixes, suffixes
    places: tuple[str, ...]  # states and countries
    email_domains: tuple[str, ...]
    #: Names and places, which ITN writes capitalised wherever they are said.
    proper_names: frozenset[str]

    @classmethod
    def load(cls, count: int = WORD_COUNT) -> Lexicon:
        """The lists from wordfreq and faker (a second or two: load once per process)."""
        from faker.providers.address.en_US import Provider as Address
        from faker.providers.internet.en_US import Provider as Internet
        from faker.providers.person.en import Provider as Person
        from faker.providers.person.en_US import Provider as UsPerson
        from wordfreq import top_n_list

        words = [w for w in top_n_list("en", count * 2) if _plain_word(w)][:count]
        places = [
            p for p in (*Address.states, *Address.countries) if re.fullmatch(r"[A-Za-z ]+", p)
        ]
        first_names = _kept([*Person.first_names, *UsPerson.first_names])
        surnames = _kept([*UsPerson.last_names, *Person.last_names])
        kept_places = _kept(places)
        return cls(
            words=_kept(words),
            first_names=first_names,
            surnames=surnames,
            street_suffixes=_kept(list(Address.street_suffixes)),
            city_parts=(_kept(list(Address.city_prefixes)), _kept(list(Address.city_suffixes))),
            places=kept_places,
            email_domains=tuple(Internet.free_email_domains),
            proper_names=frozenset((*first_names, *surnames, *kept_places)),
        )


def _plain_word(word: str) -> bool:
    """Letters (and one apostrophe inside), two or more of them, or "a" and "i"."""
    return re.fullmatch(r"[a-z]+(?:'[a-z]+)?", word) is not None and (
        len(word) > 1 or word in ("a", "i")
    )


def _kept(values: list[str]) -> tuple[str, ...]:
    """`values` without duplicates and without any that say a held word or a word that
    begins with one (`wide_words.says_held`)."""
    return tuple(dict.fromkeys(v for v in values if not wide_words.says_held(v)))


def _sentence(written: str, said: str | None = None) -> texts.Sentence:
    """A sentence whose spoken form is `said` (default: `written`) as plain words; the
    synthesiser is given `said` itself, so its commas make pauses."""
    said = written if said is None else said
    return texts.Sentence(written, texts.spoken_words(said), said=said)


def _word(lex: Lexicon, rng: random.Random) -> str:
    """A word: half the time weighted to the commonest (half of those draws from the
    first tenth of the list), else evenly from the whole list."""
    if rng.random() < 0.5:
        return lex.words[int(rng.random() ** 3 * len(lex.words))]
    return rng.choice(lex.words)


def word_run(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    """2 to 9 words, written as a sentence."""
    proper = lex.proper_names
    words = [_word(lex, rng) for _ in range(rng.randint(2, 9))]
    words = [w.capitalize() if w.capitalize() in proper else w for w in words]
    words = ["I" if w == "i" else re.sub(r"^i'", "I'", w) for w in words]
    written = words[0][0].upper() + " ".join(words)[1:] + "."
    return _sentence(written)


def _name(lex: Lexicon, rng: random.Random) -> str:
    return f"{rng.choice(lex.first_names)} {rng.choice(lex.surnames)}"


def _street(lex: Lexicon, rng: random.Random) -> tuple[str, str]:
    """(written, said) of a house number and a street."""
    number = rng.choice([rng.randint(1, 99), rng.randint(100, 999), rng.randint(1000, 9999)])
    base = rng.choice(lex.surnames if rng.random() < 0.6 else lex.first_names)
    suffix = rng.choice(lex.street_suffixes)
    return f"{number} {base} {suffix}", f"{_number_said(number, rng)} {base} {suffix}"


def _city(lex: Lexicon, rng: random.Random) -> str:
    prefixes, suffixes = lex.city_parts
    base = rng.choice(lex.surnames + lex.first_names)
    draw = rng.random()
    if draw < 0.25:
        return f"{rng.choice(prefixes)} {base}"
    if draw < 0.5:
        return rng.choice(lex.places)
    return base + rng.choice(suffixes) if draw < 0.75 else base


def _company(lex: Lexicon, rng: random.Random) -> str:
    kind = rng.choice(("Inc", "Group", "and Sons", "Limited", "Services", "Partners"))
    if rng.random() < 0.4:
        return f"{rng.choice(lex.surnames)} and {rng.choice(lex.surnames)}"
    return f"{rng.choice(lex.surnames)} {kind}"


NAME_FRAMES = (
    "My name is {name}.",
    "This is {name} calling from {company}.",
    "Can I speak to {first}, please?",
    "Please ask for {surname}.",
    "I live at {street}.",
    "The address is {street}, {city}.",
    "We moved to {city} last year.",
    "I work for {company}.",
    "{name} called about the {word}.",
    "Is {first} {surname} there?",
    "The delivery goes to {street} in {city}.",
    "{first}, the {word} is ready.",
)


def name_sentence(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    """People, streets, towns and companies in call-centre frames."""
    frame = rng.choice(NAME_FRAMES)
    street, street_said = _street(lex, rng)
    fills = {
        "name": _name(lex, rng),
        "first": rng.choice(lex.first_names),
        "surname": rng.choice(lex.surnames),
        "company": _company(lex, rng),
        "city": _city(lex, rng),
        "word": _word(lex, rng),
    }
    written = frame.format(street=street, **fills)
    return _sentence(written, frame.format(street=street_said, **fills))


def _number_said(number: int, rng: random.Random) -> str:
    """A house or order number as said: whole, in pairs, or digit by digit."""
    digits = str(number)
    style = rng.random()
    if len(digits) == 4 and style < 0.4:
        return f"{texts.words(int(digits[:2]))} {_pair(digits[2:])}"
    if style < 0.7:
        return texts.words(number)
    return digit_run(digits, rng)


def _pair(two: str) -> str:
    """Two digits as a caller says them in pairs: "05" is "oh five", "00" "hundred"."""
    if two == "00":
        return "hundred"
    if two[0] == "0":
        return f"oh {texts.words(int(two[1]))}"
    return texts.words(int(two))


def _digit(d: str, rng: random.Random) -> str:
    if d == "0":
        return "oh" if rng.random() < 0.4 else "zero"
    return texts.words(int(d))


def digit_run(digits: str, rng: random.Random) -> str:
    """Digits one by one, a repeated digit sometimes "double" or "triple"."""
    out, i = [], 0
    while i < len(digits):
        same = len(digits[i:]) - len(digits[i:].lstrip(digits[i]))
        if same >= 3 and rng.random() < 0.4:
            out.append(f"triple {_digit(digits[i], rng)}")
            i += 3
        elif same >= 2 and rng.random() < 0.5:
            out.append(f"double {_digit(digits[i], rng)}")
            i += 2
        else:
            out.append(_digit(digits[i], rng))
            i += 1
    return " ".join(out)


def _repeaty_digits(count: int, rng: random.Random) -> str:
    """Random digits, with runs of a repeated digit more often than chance."""
    out = ""
    while len(out) < count:
        d = str(rng.randint(0, 9))
        out += d * (rng.choice((1, 1, 1, 2, 3)) if rng.random() < 0.5 else 1)
    return out[:count]


NUMBER_FRAMES = (
    "The number is {digits}.",
    "It is {digits}.",
    "My reference is {digits}.",
    "That is {digits}, yes.",
    "The code they gave me was {digits}.",
)


def number_sentence(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    """A digit string read one of the ways callers read them, half of them bare.

    Written as ITN writes digits said one by one: groups said with pauses between them
    keep those groups ("4111 1111"), a run said without pauses is one number."""
    groups = [
        _repeaty_digits(rng.choice((2, 3, 3, 4, 4, 4)), rng)
        for _ in range(rng.choice((1, 1, 2, 3, 4)))
    ]
    pairs = len(groups) == 1 and len(groups[0]) == 4 and rng.random() < 0.3
    if pairs:
        said = f"{_pair(groups[0][:2])} {_pair(groups[0][2:])}"
    else:
        said = ", ".join(digit_run(g, rng) for g in groups)
    written_digits = " ".join(groups)
    if rng.random() < 0.5:
        return _bare(written_digits, said)
    frame = rng.choice(NUMBER_FRAMES)
    return _sentence(frame.format(digits=written_digits), frame.format(digits=said))


def _bare(written: str, said: str) -> texts.Sentence:
    """An utterance of digits alone: no capital to start it and no full stop."""
    return texts.Sentence(written, texts.spoken_words(said), said=said)


def email_address(lex: Lexicon, rng: random.Random) -> tuple[str, str, str]:
    """(written, spoken, said) of an address as people give theirs."""
    first, last = (
        re.sub(r"[^a-z]", "", rng.choice(names).lower())
        for names in (lex.first_names, lex.surnames)
    )
    number = str(rng.randint(1, 99)) if rng.random() < 0.3 else ""
    style = rng.randrange(4)
    initial = first[0]
    if style == 0:
        local, spoken, said = f"{first}.{last}", f"{first} dot {last}", ""
    elif style == 1:
        local, spoken, said = initial + last, f"{initial} {last}", f"{_letter(initial)} {last}"
    elif style == 2:
        local, spoken, said = f"{first}_{last}", f"{first} underscore {last}", ""
    else:
        local, spoken, said = first + last, f"{first} {last}", ""
    said = said or spoken
    if number:
        spoken, said = (f"{part} {texts.words(int(number))}" for part in (spoken, said))
    if rng.random() < 0.6:
        domain = rng.choice(lex.email_domains)
    else:
        domain = f"{rng.choice(lex.surnames).lower()}.{rng.choice(('com', 'org', 'net'))}"
    at = " at " + " dot ".join(domain.split("."))
    return f"{local}{number}@{domain}", spoken + at, said + at


EMAIL_FRAMES = ("My email is {email}.", "Send it to {email}, please.", "It is {email}.")


def email_sentence(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    written, spoken, said = email_address(lex, rng)
    if rng.random() >= 0.3:
        frame = rng.choice(EMAIL_FRAMES)
        written, spoken, said = (frame.format(email=x) for x in (written, spoken, said))
    return texts.Sentence(written, texts.spoken_words(spoken), said=said)


def _letter(letter: str) -> str:
    return LETTER_SAID.get(letter, letter)


def spelled_sentence(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    """A name and then its letters, written in capitals with spaces between them."""
    name = rng.choice(lex.surnames + lex.first_names)
    letters = [c for c in name.lower() if c.isalpha()]
    frame = rng.choice(
        ("My surname is {name}, {letters}.", "That is {name}, spelt {letters}.", "{letters}.")
    )
    written = frame.format(name=name, letters=" ".join(c.upper() for c in letters))
    spoken = frame.format(name=name, letters=" ".join(letters))
    said = frame.format(name=name, letters=", ".join(_letter(c) for c in letters))
    return texts.Sentence(written, texts.spoken_words(spoken), said=said)


def slot_sentence(lex: Lexicon, rng: random.Random) -> texts.Sentence:
    """A base template whose name, city, thing or team comes from the open lists."""
    template = rng.choice(
        [t for t in texts.TEMPLATES if any(f"{{{s}}}" in t for s in wide_words.REAL)]
    )
    open_values: dict[str, Callable[[], str]] = {
        "name": lambda: rng.choice(lex.first_names),
        "city": lambda: _city(lex, rng),
        "thing": lambda: _word(lex, rng),
        "team": lambda: _word(lex, rng),
    }
    fills: dict[str, texts.Fill] = {}
    for slot in re.findall(r"{(\w+)}", template):
        if slot in open_values:
            value = open_values[slot]()
            fills[slot] = value, value.lower()
        else:
            fills[slot] = texts.SLOTS[slot](rng)
    written = template.format(**{k: w for k, (w, _) in fills.items()})
    return _sentence(written, template.format(**{k: s for k, (_, s) in fills.items()}))


KINDS: dict[str, Callable[[Lexicon, random.Random], texts.Sentence]] = {
    "words": word_run,
    "names": name_sentence,
    "numbers": number_sentence,
    "email": email_sentence,
    "spelled": spelled_sentence,
    "slots": slot_sentence,
}


def open_sentence(lex: Lexicon, rng: random.Random, kind: str | None = None) -> texts.Sentence:
    """A sentence of `kind`, or of a kind drawn by `KIND_SHARES`."""
    if kind is None:
        names, shares = zip(*KIND_SHARES, strict=True)
        kind = rng.choices(names, weights=shares)[0]
    return KINDS[kind](lex, rng)


def held_out(lex: Lexicon, seed: int, count: int) -> list[texts.Sentence]:
    """`count` distinct held-out open sentences, the kinds in their shares."""
    rng, out, seen = random.Random(seed), list[texts.Sentence](), set[str]()
    while len(out) < count:
        s = open_sentence(lex, rng)
        if s.held_out and s.spoken not in seen:
            seen.add(s.spoken)
            out.append(s)
    return out


def tokenizer_lines(count: int = 30000, seed: int = 7) -> Iterator[str]:
    """Both forms of `count` open sentences, for learning the pieces they need."""
    lex, rng = Lexicon.load(), random.Random(seed)
    for _ in range(count):
        sentence = open_sentence(lex, rng)
        yield sentence.written
        yield sentence.spoken
