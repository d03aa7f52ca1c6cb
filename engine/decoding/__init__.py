"""From the network's CTC ids to timed, tagged transcripts, and the recognizer over it all."""
