"""A whole recording's speakers, clustered at its end (the file API), and named after the
known speakers a request gives references for.

Online labels (`streaming.speakers.online`) must be given before the rest is heard. A file
is answered once all of it is decoded, so its voices are clustered together instead:
average-linkage agglomerative clustering on cosine distance (scipy), cut where clusters
are less alike than the online threshold, or at `max_speakers`/`min_speakers` clusters
when that cut gives more or fewer. Voices shorter than `min_new_s` are too noisy to
cluster; each joins the nearest cluster. Clusters are numbered S1, S2, … in order of
first appearance, or take a known speaker's name: each known speaker names the cluster
most like their reference (one each, most alike first) if it is at least
`KNOWN_THRESHOLD` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from streaming.events import Final
from streaming.speakers.labels import Heard, Voice, with_speakers
from streaming.speakers.online import SpeakerPolicy

# A reference clip is recorded apart from the file: a little less alike than two
# utterances of one recording (measured: 0.79-0.91 same voice, 0.43-0.60 different).
KNOWN_THRESHOLD = 0.65


@dataclass(frozen=True, slots=True)
class KnownSpeaker:
    """A speaker a request names, and the embedding of their reference clip."""

    name: str
    vector: np.ndarray


def _unit(v: np.ndarray) -> np.ndarray:
    out: np.ndarray = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def cluster(
    vectors: np.ndarray, seconds: Sequence[float], policy: SpeakerPolicy, min_speakers: int | None
) -> list[int]:
    """Each voice's cluster, numbered 0, 1, … in order of first appearance."""
    n = len(seconds)
    if n == 0:
        return []
    long = [i for i in range(n) if seconds[i] >= policy.min_new_s] or list(range(n))
    ids = _cut(vectors[long], policy, min_speakers)
    means = [
        _unit(vectors[[i for i, c in zip(long, ids, strict=True) if c == k]].sum(0))
        for k in sorted(set(ids))
    ]
    found = dict(zip(long, ids, strict=True))
    raw = [found.get(i, int(np.argmax([float(vectors[i] @ m) for m in means]))) for i in range(n)]
    order: dict[int, int] = {}
    return [order.setdefault(c, len(order)) for c in raw]


def _cut(vectors: np.ndarray, policy: SpeakerPolicy, min_speakers: int | None) -> list[int]:
    """Cluster ids (0-based, in any order) of `vectors`."""
    if len(vectors) == 1:
        return [0]
    tree = linkage(vectors.astype(np.float64), method="average", metric="cosine")
    ids = fcluster(tree, t=1.0 - policy.threshold, criterion="distance")
    count = int(ids.max())
    cap, floor = policy.max_speakers, min_speakers
    if cap is not None and count > cap:
        ids = fcluster(tree, t=cap, criterion="maxclust")
    elif floor is not None and count < floor:
        ids = fcluster(tree, t=min(floor, len(vectors)), criterion="maxclust")
    return [int(i) - 1 for i in ids]


def names_for(means: Sequence[np.ndarray], known: Sequence[KnownSpeaker]) -> dict[int, str]:
    """Which cluster each known speaker names: most alike pairs first, one each."""
    pairs = sorted(
        ((float(m @ k.vector), c, i) for c, m in enumerate(means) for i, k in enumerate(known)),
        reverse=True,
    )
    named: dict[int, str] = {}
    used: set[int] = set()
    for score, c, i in pairs:
        if score >= KNOWN_THRESHOLD and c not in named and i not in used:
            named[c] = known[i].name
            used.add(i)
    return named


def relabel(
    finals: Sequence[Final],
    kept: Sequence[tuple[int, Voice]],
    policy: SpeakerPolicy,
    min_speakers: int | None = None,
    known: Sequence[KnownSpeaker] = (),
) -> list[Final]:
    """The finals with speakers from clustering all of `kept` (each voice with the
    utterance it was heard in) at once."""
    if not kept:
        return list(finals)
    vectors = np.stack([_unit(np.asarray(v.vector, np.float64)) for _, v in kept])
    ids = cluster(vectors, [v.seconds for _, v in kept], policy, min_speakers)
    means = [
        _unit(vectors[[i for i, c in enumerate(ids) if c == k]].sum(0)) for k in range(max(ids) + 1)
    ]
    named = names_for(
        means, [KnownSpeaker(k.name, _unit(np.asarray(k.vector, np.float64))) for k in known]
    )
    unnamed = iter(range(1, len(means) + 1))
    labels = [named[c] if c in named else f"S{next(unnamed)}" for c in range(len(means))]
    heard: dict[int, list[Heard]] = {}
    for (utt, voice), c, vector in zip(kept, ids, vectors, strict=True):
        heard.setdefault(utt, []).append(Heard(voice, labels[c], float(vector @ means[c])))
    return [with_speakers(f, heard.get(f.utt_id, [])) for f in finals]
