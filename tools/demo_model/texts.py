"""Training and test sentences: call-centre and caption English with numbers, times, dates.

Every sentence has two forms, as SenseVoice's two text-norm modes write it: `written`
(with ITN: case, punctuation, digits, "$42.50", "3:30 PM") and `spoken` (without ITN:
lowercase words as said, "forty two dollars and fifty cents"). The synthesiser is given
the spoken form, so the audio says exactly what both targets mean.

A fixed share of all possible sentences is held out by a hash of its spoken form: the
training stream never yields them and `held_out` yields only them.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from num2words import num2words

#: Per mille of sentences kept out of training, by hash.
HELD_OUT_PER_MILLE = 60


@dataclass(frozen=True, slots=True)
class Sentence:
    written: str
    spoken: str
    #: What the synthesiser is given when it is not `spoken`: commas for pauses between
    #: digit groups, "ay" for a spelled letter a (which alone reads as the article).
    said: str = ""

    @property
    def voiced(self) -> str:
        return self.said or self.spoken

    @property
    def held_out(self) -> bool:
        digest = hashlib.sha1(self.spoken.encode()).digest()
        return int.from_bytes(digest[:4], "big") % 1000 < HELD_OUT_PER_MILLE


Fill = tuple[str, str]  # (written, spoken)
Slot = Callable[[random.Random], Fill]


def words(n: int) -> str:
    """A number as spoken words, without hyphens or commas."""
    return str(num2words(n)).replace("-", " ").replace(",", "")


def _money(rng: random.Random) -> Fill:
    dollars = rng.choice([rng.randint(1, 20), rng.randint(20, 999)])
    if rng.random() < 0.4:
        return f"${dollars}", f"{words(dollars)} dollars"
    cents = rng.randint(1, 99)
    return f"${dollars}.{cents:02d}", f"{words(dollars)} dollars and {words(cents)} cents"


def _time(rng: random.Random) -> Fill:
    hour, minute = rng.randint(1, 12), rng.choice([0, 15, 30, 45, rng.randint(1, 59)])
    half = rng.choice(["AM", "PM"])
    spoken_half = "a m" if half == "AM" else "p m"
    if minute == 0:
        return f"{hour} {half}", f"{words(hour)} {spoken_half}"
    said = f"oh {words(minute)}" if minute < 10 else words(minute)
    return f"{hour}:{minute:02d} {half}", f"{words(hour)} {said} {spoken_half}"


MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _ordinal_suffix(day: int) -> str:
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _date(rng: random.Random) -> Fill:
    month, day = rng.choice(MONTHS), rng.randint(1, 28)
    spoken_day = str(num2words(day, to="ordinal")).replace("-", " ")
    return f"{month} {day}{_ordinal_suffix(day)}", f"{month.lower()} {spoken_day}"


def _year(rng: random.Random) -> Fill:
    year = rng.choice([rng.randint(1950, 1999), rng.randint(2010, 2029)])
    return str(year), str(num2words(year, to="year")).replace("-", " ")


def _count(rng: random.Random) -> Fill:
    n = rng.randint(2, 12)
    return str(n), words(n)


def _number(rng: random.Random) -> Fill:
    n = rng.choice([rng.randint(13, 99), rng.randint(100, 999), rng.randint(1000, 9999)])
    return str(n), words(n)


def _digits(rng: random.Random) -> Fill:
    digits = [rng.randint(0, 9) for _ in range(rng.randint(4, 6))]
    return "".join(map(str, digits)), " ".join(words(d) for d in digits)


def _percent(rng: random.Random) -> Fill:
    n = rng.randint(1, 99)
    return f"{n}%", f"{words(n)} percent"


def _choice(options: str) -> Slot:
    """A slot of fixed words, written capitalised where they are, spoken in lowercase."""
    values = options.split("|")

    def fill(rng: random.Random) -> Fill:
        value = rng.choice(values)
        return value, value.lower()

    return fill


SLOTS: dict[str, Slot] = {
    "money": _money,
    "time": _time,
    "date": _date,
    "year": _year,
    "count": _count,
    "number": _number,
    "digits": _digits,
    "percent": _percent,
    "day": _choice("|".join(DAYS)),
    "month": _choice("|".join(MONTHS)),
    "name": _choice(
        "Anna|David|Maria|James|Sarah|Michael|Emma|Daniel|Laura|Peter|Sophie|Thomas|Olivia"
        "|Robert|Grace|Kevin|Helen|Brian|Julia|Mark"
    ),
    "city": _choice(
        "London|Paris|Boston|Chicago|Dublin|Sydney|Toronto|Berlin|Madrid|Seattle|Denver"
    ),
    "thing": _choice(
        "order|account|invoice|password|subscription|router|package|booking|card|refund"
        "|delivery|appointment|contract|payment|phone"
    ),
    "team": _choice("billing|support|sales|technical|delivery|accounts"),
}

TEMPLATES = (
    "Your balance is {money}.",
    "The total comes to {money}.",
    "We will refund {money} to your card.",
    "I was charged {money} twice.",
    "The monthly fee is {money}.",
    "Your appointment is at {time}.",
    "We open at {time} on {day}.",
    "Can you call me back at {time}?",
    "The meeting starts at {time}.",
    "The next train leaves at {time}.",
    "Your {thing} will arrive on {date}.",
    "The payment is due on {date}.",
    "I placed the order on {date}.",
    "Your contract ends on {date}, {year}.",
    "The store opened in {year}.",
    "I have had this {thing} since {year}.",
    "I have {count} questions about my {thing}.",
    "There are {count} items in your {thing}.",
    "It will take {count} working days.",
    "Please wait {count} minutes.",
    "Your reference number is {digits}.",
    "The last digits of the card are {digits}.",
    "My account number is {digits}.",
    "Your order number is {number}.",
    "We shipped {number} packages today.",
    "The price went up by {percent}.",
    "You get {percent} off this month.",
    "Hello, my name is {name}.",
    "Thank you for calling, this is {name}.",
    "Can I speak to {name}, please?",
    "{name} from the {team} team will call you.",
    "I am calling about my {thing}.",
    "I would like to cancel my {thing}.",
    "There is a problem with my {thing}.",
    "Let me transfer you to the {team} team.",
    "The weather in {city} is sunny today.",
    "Tonight we fly to {city}.",
    "Our office in {city} is closed on {day}.",
    "See you on {day} at {time}.",
    "The {team} team is busy right now.",
    "I moved to {city} in {month}.",
    "{name} paid {money} on {date}.",
    "The show starts at {time} on {day}.",
)

PHRASES = (
    "Thank you for calling, how can I help you today?",
    "Can you hear me?",
    "Please hold the line.",
    "I am sorry to hear that.",
    "Let me check that for you.",
    "Is there anything else I can help you with?",
    "Have a nice day.",
    "Could you spell your last name, please?",
    "Can you confirm your date of birth?",
    "I will send you an email with the details.",
    "Your call is important to us.",
    "The line is very quiet.",
    "I did not get the message.",
    "That sounds good to me.",
    "Can you repeat that, please?",
    "We are having network problems in your area.",
    "Please restart the router and try again.",
    "Good morning, everyone.",
    "Welcome back to the show.",
    "Let us take a look at the weather.",
    "Here are the main stories today.",
    "Thank you very much for watching.",
    "We will be right back after the break.",
    "The results will be ready next week.",
    "I think we should start now.",
    "Yes, that is correct.",
    "No, that is not right.",
    "Okay, thank you.",
    "Please speak after the tone.",
    "All of our agents are busy.",
    "I understand, let me help you with that.",
    "Could you give me your postcode?",
    "The update will be installed tonight.",
    "My internet is not working.",
    "The battery does not charge.",
    "I forgot my password again.",
    "We have received your complaint.",
    "Your feedback helps us improve.",
    "The train is running late today.",
    "It is going to rain this afternoon.",
)


def sentence(rng: random.Random) -> Sentence:
    """One random sentence: a template with its slots filled (3 in 4), or a phrase."""
    if rng.random() < 0.25:
        written = rng.choice(PHRASES)
        return Sentence(written, spoken_words(written))
    template = rng.choice(TEMPLATES)
    fills = {name: SLOTS[name](rng) for name in re.findall(r"{(\w+)}", template)}
    written = template.format(**{k: w for k, (w, _) in fills.items()})
    spoken = template.format(**{k: s for k, (_, s) in fills.items()})
    return Sentence(written, spoken_words(spoken))


def spoken_words(text: str) -> str:
    """Lowercase words with no punctuation but apostrophes: the without-ITN form."""
    return " ".join(re.sub(r"[^a-z' ]+", " ", text.lower()).split())


def training(seed: int) -> Iterator[Sentence]:
    """An endless stream of sentences, none of them held out."""
    rng = random.Random(seed)
    while True:
        s = sentence(rng)
        if not s.held_out:
            yield s


def held_out(seed: int, count: int) -> list[Sentence]:
    """`count` distinct held-out sentences."""
    rng, out, seen = random.Random(seed), list[Sentence](), set[str]()
    while len(out) < count:
        s = sentence(rng)
        if s.held_out and s.spoken not in seen:
            seen.add(s.spoken)
            out.append(s)
    return out
