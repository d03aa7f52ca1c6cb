"""Build a SenseVoiceSmall model dir with random weights, for tests and offline development.

The dir has the real SenseVoiceSmall layout (model.pt, config.yaml, am.mvn,
configuration.json and a 25055-piece sentencepiece model with the special tokens at the
ids funasr hard-codes), so funasr's AutoModel and our engine load it like the real model.
Transcripts are meaningless: the weights are random.

    python scripts/make_test_model.py --size tiny|full --out DIR [--seed N] [--shared DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VOCAB_SIZE = 25055
INPUT_SIZE = 560
SPECIAL_START = 24884
BPE_MODEL_NAME = "chn_jpn_yue_eng_ko_spectok.bpe.model"
MARKER_NAME = "sensestream_test_model.json"
SHARED_FILES = ("config.yaml", "configuration.json", "am.mvn")
COPIED_FILES = ("configuration.json", "am.mvn")
TINY_ENCODER = {
    "output_size": 64,
    "attention_heads": 2,
    "linear_units": 128,
    "num_blocks": 2,
    "tp_blocks": 1,
}
TRAINED_VOCAB = 1000

# Special tokens at fixed ids; every other id in SPECIAL_START..VOCAB_SIZE-1 is reserved.
# funasr's model.py hard-codes the language, emotion and text-norm ids. The order of the
# event tokens (24993..25000) is not confirmed for the real model.
SPECIAL_TOKENS: dict[int, str] = {
    24884: "<|zh|>",
    24885: "<|en|>",
    24888: "<|yue|>",
    24892: "<|ja|>",
    24896: "<|ko|>",
    24992: "<|nospeech|>",
    24993: "<|Speech|>",
    24994: "<|BGM|>",
    24995: "<|Applause|>",
    24996: "<|Laughter|>",
    24997: "<|Cry|>",
    24998: "<|Sneeze|>",
    24999: "<|Breath|>",
    25000: "<|Cough|>",
    25001: "<|HAPPY|>",
    25002: "<|SAD|>",
    25003: "<|ANGRY|>",
    25004: "<|NEUTRAL|>",
    25005: "<|FEARFUL|>",
    25006: "<|DISGUSTED|>",
    25007: "<|SURPRISED|>",
    25009: "<|EMO_UNKNOWN|>",
    25010: "<|Sing|>",
    25011: "<|Speech_Noise|>",
    25012: "<|Event_UNK|>",
    25013: "<|GBG|>",
    25016: "<|withitn|>",
    25017: "<|woitn|>",
}

ENGLISH_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a test of the speech recognition server.",
    "Please call me back when you get this message.",
    "The weather today is sunny with a light breeze from the west.",
    "I would like to order a cup of coffee and a slice of cake.",
    "Can you tell me how to get to the train station?",
    "We are going to the park this afternoon with the children.",
    "She reads a book every night before going to sleep.",
    "The meeting has been moved to Thursday at three o'clock.",
    "Real time transcription needs low latency and high accuracy.",
    "My phone number is five five five, one two three four.",
    "Thank you very much for your help yesterday.",
    "Do you speak English or Chinese at home?",
    "The server streams audio frames over a websocket connection.",
    "Just keep talking and the words will appear on the screen.",
    "Open the window, it is very hot in here.",
    "He bought three apples, two oranges and a banana.",
    "What time does the last bus leave tonight?",
    "Machine learning models need a lot of data to train.",
    "It was a dark and stormy night, and the rain fell in torrents.",
    "Turn left at the next corner and walk straight ahead.",
    "Good morning everyone, let us begin the lesson.",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 and 2024 also appear in speech.",
    "Quiet zones, jazz clubs and vivid yellow boxes are quite exquisite.",
    "Everybody was excited about the new project at work.",
    "Listen carefully to the instructions before you start.",
    "The doctor said I should drink more water and rest.",
    "Where did you put the keys to the car?",
    "I think it is going to rain later, so bring an umbrella.",
    "Our team won the game by a single point in overtime.",
)

CHINESE_SENTENCES = (
    "你好，世界。今天天气很好。",
    "我们一起去公园散步吧。",
    "请问火车站怎么走？",
    "这是一个语音识别服务器的测试。",
    "我想要一杯咖啡和一块蛋糕。",
    "他每天晚上睡觉前都会看书。",
    "会议改到星期四下午三点了。",
    "实时转写需要低延迟和高准确率。",
    "谢谢你昨天的帮助。",
    "你在家里说中文还是英文？",
    "请把窗户打开，这里太热了。",
    "最后一班公交车几点出发？",
    "机器学习模型需要大量的数据来训练。",
    "下一个路口左转然后一直往前走。",
    "大家早上好，我们开始上课吧。",
    "医生说我应该多喝水多休息。",
    "你把车钥匙放在哪里了？",
    "我觉得等会儿要下雨，带把伞吧。",
    "我们队在加时赛中以一分之差赢得了比赛。",
    "中华人民共和国成立于一九四九年。",
    "北京上海广州深圳都是大城市。",
    "学生们在教室里认真地学习汉语。",
    "春夏秋冬，东南西北，上下左右，前后里外。",
    "一二三四五六七八九十百千万亿。",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明社长",
    "我爱你。他是我的朋友。这个问题很重要。",
)

OTHER_SENTENCES = (
    "こんにちは、世界。今日はいい天気ですね。",
    "ありがとうございます。",
    "안녕하세요, 세계. 오늘 날씨가 좋네요.",
    "감사합니다.",
    "早晨，你食咗饭未呀？",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description="Build a SenseVoiceSmall model dir with RANDOM weights (for tests)."
    )
    parser.add_argument("--size", choices=("tiny", "full"), required=True)
    parser.add_argument("--out", type=Path, required=True, help="model dir to write")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the weights")
    parser.add_argument(
        "--shared",
        type=Path,
        default=None,
        help="dir with the real config.yaml, configuration.json and am.mvn "
        "(default: $SENSESTREAM_SHARED_DIR or <repo>/../shared/sensevoice-small)",
    )
    return parser.parse_args(argv)


def resolve_shared_dir(arg: Path | None) -> Path:
    """Pick the shared dir: --shared, then $SENSESTREAM_SHARED_DIR, then the default."""
    if arg is not None:
        return arg
    env = os.environ.get("SENSESTREAM_SHARED_DIR")
    if env:
        return Path(env)
    repo_root = Path(__file__).resolve().parent.parent
    return repo_root.parent / "shared" / "sensevoice-small"


def check_shared_dir(shared: Path) -> None:
    """Exit with a clear message if the shared dir lacks one of the real model's small files."""
    missing = [name for name in SHARED_FILES if not (shared / name).is_file()]
    if missing:
        sys.exit(
            f"make_test_model: shared dir {shared} is missing {', '.join(missing)}; "
            "pass --shared DIR or set SENSESTREAM_SHARED_DIR to a dir holding "
            f"{', '.join(SHARED_FILES)} of the real SenseVoiceSmall"
        )


def make_config_text(real_text: str, size: str) -> str:
    """Return config.yaml text: the real one for full, smaller encoder_conf values for tiny."""
    if size == "full":
        return real_text
    text = real_text
    for key, value in TINY_ENCODER.items():
        pattern = re.compile(rf"^(\s+{key}:)\s*\d+\s*$", re.MULTILINE)
        text, count = pattern.subn(rf"\g<1> {value}", text)
        if count != 1:
            raise ValueError(f"config.yaml: expected one '{key}:' line, found {count}")
    return text


def load_config(text: str) -> dict[str, Any]:
    """Parse config.yaml text and check the encoder/model entries the build needs."""
    import yaml

    config = yaml.safe_load(text)
    if not isinstance(config, dict) or "encoder_conf" not in config:
        raise ValueError("config.yaml has no encoder_conf")
    return config


def build_model(config: dict[str, Any], seed: int) -> Any:
    """Build funasr's SenseVoiceSmall with random weights from the config."""
    import funasr  # noqa: F401  (populates funasr.register.tables)
    import torch
    from funasr.models.sense_voice.model import SenseVoiceSmall

    torch.manual_seed(seed)
    model = SenseVoiceSmall(
        encoder=config.get("encoder", "SenseVoiceEncoderSmall"),
        encoder_conf=dict(config["encoder_conf"]),
        input_size=INPUT_SIZE,
        vocab_size=VOCAB_SIZE,
        **dict(config.get("model_conf") or {}),
    )
    model.eval()
    return model


def corpus_sentences(rounds: int = 20) -> Iterator[str]:
    """Yield the tokenizer training corpus: the fixed sentences, shuffled per round (seeded)."""
    base = list(ENGLISH_SENTENCES + CHINESE_SENTENCES + OTHER_SENTENCES)
    for round_no in range(rounds):
        yield from random.Random(round_no).sample(base, len(base))


def train_bpe() -> bytes:
    """Train a small BPE sentencepiece model in memory and return its serialized proto."""
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus_sentences(),
        model_writer=buffer,
        model_type="bpe",
        vocab_size=TRAINED_VOCAB,
        hard_vocab_limit=False,
        character_coverage=1.0,
        byte_fallback=False,
        normalization_rule_name="identity",
        num_threads=1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return buffer.getvalue()


def special_piece(piece_id: int) -> str:
    """Return the special piece for an id in the special range."""
    return SPECIAL_TOKENS.get(piece_id, f"<|reserved_{piece_id}|>")


def pad_tokenizer(trained: bytes) -> bytes:
    """Pad a trained model to VOCAB_SIZE pieces: NORMAL fillers, then the special range."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(trained)
    n_trained = len(proto.pieces)
    if n_trained >= SPECIAL_START:
        raise ValueError(f"trained tokenizer too large: {n_trained} pieces")
    seen = {p.piece for p in proto.pieces}
    for piece_id in range(n_trained, VOCAB_SIZE):
        piece = proto.pieces.add()
        if piece_id < SPECIAL_START:
            piece.piece = f"▁w{piece_id}"
            piece.score = -1.0e6 - piece_id
            piece.type = pb.ModelProto.SentencePiece.NORMAL
        else:
            piece.piece = special_piece(piece_id)
            piece.score = 0.0
            piece.type = pb.ModelProto.SentencePiece.USER_DEFINED
        if piece.piece in seen:
            raise ValueError(f"duplicate tokenizer piece {piece.piece!r}")
        seen.add(piece.piece)
    proto.trainer_spec.vocab_size = VOCAB_SIZE
    return proto.SerializeToString()


def check_tokenizer(model_bytes: bytes) -> None:
    """Load the padded tokenizer and verify its size and special ids."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    if sp.get_piece_size() != VOCAB_SIZE:
        raise ValueError(f"tokenizer has {sp.get_piece_size()} pieces, want {VOCAB_SIZE}")
    for piece_id, piece in SPECIAL_TOKENS.items():
        if sp.piece_to_id(piece) != piece_id:
            raise ValueError(f"{piece} at id {sp.piece_to_id(piece)}, want {piece_id}")


def write_model(out: Path, model: Any) -> int:
    """Save the model's plain state_dict to model.pt; return its parameter count."""
    import torch

    torch.save(model.state_dict(), out / "model.pt")
    return int(sum(p.numel() for p in model.parameters()))


def write_marker(out: Path, size: str, seed: int, parameters: int) -> None:
    """Write the marker file that tells servers this is a random-weight test model."""
    marker = {
        "test_model": True,
        "size": size,
        "seed": seed,
        "parameters": parameters,
        "warning": "random weights: transcripts are meaningless",
    }
    (out / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def build(out: Path, size: str, seed: int, shared: Path) -> int:
    """Write the whole model dir; return the parameter count."""
    check_shared_dir(shared)
    config_text = make_config_text((shared / "config.yaml").read_text(encoding="utf-8"), size)
    config = load_config(config_text)
    tokenizer = pad_tokenizer(train_bpe())
    check_tokenizer(tokenizer)
    model = build_model(config, seed)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(config_text, encoding="utf-8")
    for name in COPIED_FILES:
        shutil.copyfile(shared / name, out / name)
    (out / BPE_MODEL_NAME).write_bytes(tokenizer)
    parameters = write_model(out, model)
    write_marker(out, size, seed, parameters)
    return parameters


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    args = parse_args(argv)
    shared = resolve_shared_dir(args.shared)
    start = time.perf_counter()
    parameters = build(args.out, args.size, args.seed, shared)
    seconds = time.perf_counter() - start
    print(
        f"make_test_model: wrote {args.size} model (RANDOM weights, seed {args.seed}) to "
        f"{args.out}: {parameters:,} parameters in {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
