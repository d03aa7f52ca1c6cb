"""The redaction benchmark's judging: what counts as caught, recall and precision."""

from __future__ import annotations

from tools.bench.redaction import CASES, case, caught, score

CARD = case("the card is four one one one", "pci numbers", "4111")
MONEY = case("forty two dollars and fifty cents", "numbers", "4250")
NONE = case("please hold the line", "")


def test_caught_needs_the_placeholder_and_no_secret_left() -> None:
    assert caught("The card is [PCI].", CARD, "pci")
    assert not caught("The card is 4111 [PCI].", CARD, "pci")  # a part still shows
    assert not caught("The card is 4111.", CARD, "pci")
    assert not caught("The card is [NUMBERS].", CARD, "pci")  # another policy's
    assert caught("It is $[NUMBERS].", MONEY, "numbers")
    assert not caught("It is $42.50.", MONEY, "numbers")  # "42.50" is the secret "4250"


def test_recall_and_precision_per_policy() -> None:
    rows = [
        (CARD, "The card is [PCI]."),
        (CARD, "The card is 4111."),
        (NONE, "Please [PCI] the line."),
        (MONEY, "It is $[NUMBERS]."),
    ]
    pci = score("pci", rows)
    assert (pci["sentences"], pci["caught"], pci["recall"]) == (2, 1, 0.5)
    assert (pci["marked"], pci["precision"]) == (2, 0.5) and not pci["passes"]
    numbers = score("numbers", rows)
    assert (numbers["sentences"], numbers["caught"], numbers["marked"]) == (3, 1, 1)
    assert numbers["precision"] == 1.0 and numbers["recall"] == 1 / 3
    assert score("email", rows)["recall"] is None


def test_every_policy_has_sentences_and_there_are_negatives() -> None:
    for policy in ("pci", "ssn", "phone", "email", "numbers"):
        assert any(policy in c.policies for c in CASES), policy
    assert sum(not c.policies for c in CASES) >= 5
