"""funasr_onnx's FSMN-VAD endpointer (`E2EVadModel`) without its per-sample busy loops.

`PopDataToOutputBuf` runs for every frame of speech and counted one by one up to the
frame's samples (160, or the whole buffer at a sentence end) into a local it then
dropped: 14 µs a frame, about a tenth of the VAD's time. The override makes the same
changes to the endpointer's state and skips the counting; funasr's debug `print`s on
inconsistent calls go to the log instead of a server's stdout.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("sensestream.vad")


def lean_endpointer(module: Any) -> type:
    """A subclass of `module.E2EVadModel` (funasr_onnx's `utils/e2e_vad.py`)."""
    segment_buffer = module.E2EVadSpeechBufWithDoa

    class LeanEndpointer(module.E2EVadModel):  # type: ignore[misc]
        def PopDataToOutputBuf(
            self,
            start_frm: int,
            frm_cnt: int,
            first_frm_is_start_point: bool,
            last_frm_is_end_point: bool,
            end_point_is_sent_end: bool,
        ) -> None:
            self.PopDataBufTillFrame(start_frm)
            frame_ms = self.vad_opts.frame_in_ms
            if not self.output_data_buf or first_frm_is_start_point:
                fresh = segment_buffer()
                fresh.start_ms = fresh.end_ms = start_frm * frame_ms
                self.output_data_buf.append(fresh)
            segment = self.output_data_buf[-1]
            if segment.end_ms != start_frm * frame_ms:
                log.debug(
                    "FSMN endpointer: segment ends at %d ms, frame %d", segment.end_ms, start_frm
                )
            segment.doa = 0
            self.data_buf_start_frame += frm_cnt
            segment.end_ms = (start_frm + frm_cnt) * frame_ms
            if first_frm_is_start_point:
                segment.contain_seg_start_point = True
            if last_frm_is_end_point:
                segment.contain_seg_end_point = True

    return LeanEndpointer
