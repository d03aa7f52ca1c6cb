"""The demo model: a small SenseVoice-architecture model trained here on synthetic speech.

`texts` makes sentences (written and spoken forms), `voices` speaks them, `augment`
roughens the audio, `dataset` turns both into feature shards with SenseVoice targets,
`training` fits funasr's SenseVoiceSmall with a small encoder, `evaluate` measures word
error rate and tag accuracy, and `package` writes the model dir. The command line is
scripts/train_demo_model.py.
"""
