"""`sensestream stream --resume`: a file streamed through a connection cut twice ends with
the finals of an uncut run and reports each gap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sensestream.stream.cli import parse_args, stream_one
from sensestream.stream.output import StreamResult
from tests.server.served import served
from tests.speech import Clip, three_sentences
from tools.cutting_proxy import CuttingProxy


@pytest.fixture(scope="module")
def wav(speech_clips: list[Clip], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("resume") / "talk.wav"
    audio = np.concatenate([three_sentences(speech_clips)] * 2)
    sf.write(path, audio, 16000, subtype="PCM_16")
    return path


def test_a_cut_stream_resumes_and_says_where_it_was_cut(tiny_model_dir: Path, wav: Path) -> None:
    async def scenario() -> tuple[StreamResult, StreamResult]:
        async with served(tiny_model_dir, "1", resume_grace_s=30) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            plain = await stream_one(
                wav, parse_args([str(wav), "--url", url, "--speed", "8"]), None
            )
            async with CuttingProxy(port).running() as proxy:
                via = url.replace(f":{port}/", f":{proxy.port}/")
                args = parse_args([str(wav), "--url", via, "--speed", "8", "--resume"])
                task = asyncio.create_task(stream_one(wav, args, None))
                for _ in range(2):
                    await asyncio.sleep(0.8)
                    proxy.cut()
                return plain, await task

    plain, cut = asyncio.run(scenario())
    assert plain.succeeded and cut.succeeded, cut.errors
    assert len(cut.gaps) == 2 and all(0 < g < 5 for g in cut.gaps)
    texts = [(f["utt_id"], f["text"]) for f in cut.finals]
    assert texts == [(f["utt_id"], f["text"]) for f in plain.finals] and texts
