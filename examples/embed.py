"""embed.py — sentence embeddings with stof from Python, on the CPU or a GPU.

    pip install .                      # from the repository root: builds libstof too
    python examples/embed.py [MODEL_DIR]

MODEL_DIR is a sentence-transformers or Hugging Face BERT folder (default
models/all-MiniLM-L6-v2, which scripts/fetch_model.sh fetches). numpy is the
only other package it needs.
"""

import sys

import numpy as np

import stof


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    sentences = ["A man is eating food.", "A man is eating a piece of bread.",
                 "The girl is carrying a baby.", "A man is riding a horse."]
    with stof.Model.from_pretrained(path) as model:
        emb = model.encode(sentences)  # float32 numpy [4, hidden], L2-normalised
        print(f"stof {stof.version()} on {model.device}: {emb.shape[0]} sentences -> "
              f"{emb.shape[1]}-dim embeddings")
    sim = emb @ emb.T  # cosine similarity of normalised rows
    for i in range(1, len(sentences)):
        print(f"{sim[0, i]:.4f}  {sentences[0]!r} vs {sentences[i]!r}")
    # The paraphrase is the nearest neighbour of the first sentence.
    assert int(np.argmax(sim[0, 1:])) == 0, sim


if __name__ == "__main__":
    main()
