"""stof.integrations — stof where users already are: torch.compile graphs (torch_op) and
Hugging Face transformers' attention interface (transformers). Each module imports torch
(and transformers) itself; `import stof` imports neither."""
