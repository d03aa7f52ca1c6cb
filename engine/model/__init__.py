"""The model's files: its folder, random-weight test models, tokenizer, prompts, tags, network."""
