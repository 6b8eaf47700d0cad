"""Workloads: prompts of a set token length built from real English text, and arrivals.

Pure. Token counting is injected (`count_tokens`): the host runtime passes either the
served model's tokenizer over HTTP (`/tokenize`, llama.cpp and vLLM) or a linear model
calibrated from the server's usage counts (`LinearTokenModel`).

The text is public-domain prose (Lincoln's Gettysburg Address, 1863; the openings of
Dickens' *A Tale of Two Cities*, 1859, Austen's *Pride and Prejudice*, 1813, and Melville's
*Moby-Dick*, 1851). Each request gets its own seeded order of sentences and a unique opening,
so engines cannot serve it from a prefix cache; the opening also names the run (`run`), so a
run cannot be served from what an earlier run of the same profile left in the cache (on an H200,
a revision that had served the profile's prompts before prefilled 509 of 512 tokens from cache,
and looked six times faster to first token than the same settings freshly started).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

CORPUS = """\
Four score and seven years ago our fathers brought forth on this continent, a new nation, \
conceived in Liberty, and dedicated to the proposition that all men are created equal. \
Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived \
and so dedicated, can long endure. We are met on a great battle-field of that war. We have come to \
dedicate a portion of that field, as a final resting place for those who here gave their lives that \
that nation might live. It is altogether fitting and proper that we should do this. But, in a larger \
sense, we can not dedicate, we can not consecrate, we can not hallow this ground. The brave men, \
living and dead, who struggled here, have consecrated it, far above our poor power to add or detract. \
The world will little note, nor long remember what we say here, but it can never forget what they \
did here. It is for us the living, rather, to be dedicated here to the unfinished work which they who \
fought here have thus far so nobly advanced. It is rather for us to be here dedicated to the great \
task remaining before us, that from these honored dead we take increased devotion to that cause for \
which they gave the last full measure of devotion, that we here highly resolve that these dead shall \
not have died in vain, that this nation, under God, shall have a new birth of freedom, and that \
government of the people, by the people, for the people, shall not perish from the earth. \
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of \
foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, \
it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had \
everything before us, we had nothing before us, we were all going direct to Heaven, we were all going \
direct the other way. There were a king with a large jaw and a queen with a plain face, on the throne \
of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. \
It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in \
want of a wife. However little known the feelings or views of such a man may be on his first entering \
a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is \
considered the rightful property of some one or other of their daughters. \
Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, \
and nothing particular to interest me on shore, I thought I would sail about a little and see the \
watery part of the world. It is a way I have of driving off the spleen and regulating the circulation. \
Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my \
soul; whenever I find myself involuntarily pausing before coffin warehouses, and bringing up the rear \
of every funeral I meet, then I account it high time to get to sea as soon as I can. This is my \
substitute for pistol and ball. There is nothing surprising in this. If they but knew it, almost all \
men in their degree, some time or other, cherish very nearly the same feelings towards the ocean with me.
"""

SENTENCES: tuple[str, ...] = tuple(s.strip() for s in re.split(r"(?<=[.;])\s+", CORPUS) if s.strip())

CountTokens = Callable[[str], int]


def passage_words(index: int, seed: int, n_words: int, run: str = "") -> list[str]:
    """The first n_words of request `index`'s passage: a unique opening (naming `run` when
    given), then sentences of the corpus in a seeded order (reshuffled each time the corpus
    runs out)."""
    rng = random.Random(f"{seed}:{index}")
    words = f"Passage {index + 1}{f' of run {run}' if run else ''}, read closely and continue it:".split()
    while len(words) < n_words:
        order = list(SENTENCES)
        rng.shuffle(order)
        for sentence in order:
            words.extend(sentence.split())
            if len(words) >= n_words:
                break
    return words[:n_words]


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # as counted by the counter used to fit it (incl. its fixed overhead)


def fit_prompt(
    target_tokens: int,
    count_tokens: CountTokens,
    *,
    index: int = 0,
    seed: int = 0,
    overhead: int = 0,
    max_rounds: int = 12,
    run: str = "",
) -> Prompt:
    """The longest passage whose count + overhead is <= target_tokens (>= 1 word).

    `overhead` is what the server adds around the text (chat template, BOS). Word steps make
    the result land within a word's tokens (usually 1-2) under the target.
    """
    if target_tokens <= 0:
        raise ValueError(f"target_tokens must be > 0, got {target_tokens}")
    budget = target_tokens - overhead
    if budget <= 0:
        raise ValueError(f"target of {target_tokens} tokens leaves nothing after {overhead} tokens of overhead")
    cache: dict[int, int] = {}
    pool = passage_words(index, seed, max(16, int(budget * 1.5) + 16), run)

    def count(n: int) -> int:
        nonlocal pool
        if n > len(pool):
            pool = passage_words(index, seed, n * 2, run)
        if n not in cache:
            cache[n] = count_tokens(" ".join(pool[:n]))
        return cache[n]

    # Secant steps on words -> tokens, then walk word by word to the boundary.
    n = max(1, int(budget / 1.3))
    for _ in range(max_rounds):
        got = count(n)
        if got == budget:
            break
        step = int(round(n * budget / got)) if got else n * 2
        step = max(1, step)
        if step == n:
            break
        n = step
    while n > 1 and count(n) > budget:
        n -= 1
    while count(n + 1) <= budget:
        n += 1
    return Prompt(text=" ".join(pool[:n]), tokens=count(n) + overhead)


@dataclass(frozen=True)
class LinearTokenModel:
    """tokens ~= intercept + per_word x words, fitted from two usage probes when the engine
    has no `/tokenize`. The intercept absorbs the chat template, so fit with overhead=0."""

    intercept: float
    per_word: float

    @classmethod
    def from_probes(cls, words_a: int, tokens_a: int, words_b: int, tokens_b: int) -> LinearTokenModel:
        if words_a == words_b:
            raise ValueError("the two probes need different lengths")
        per_word = (tokens_b - tokens_a) / (words_b - words_a)
        if per_word <= 0:
            raise ValueError("probe token counts do not grow with length; usage looks wrong")
        return cls(intercept=tokens_a - per_word * words_a, per_word=per_word)

    def __call__(self, text: str) -> int:
        return int(round(self.intercept + self.per_word * len(text.split())))


def poisson_offsets(rate: float, n: int, seed: int) -> list[float]:
    """Arrival times (s from the start) of n requests at `rate` req/s, Poisson, seeded.
    The first request goes at 0, as in `vllm bench serve`."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    rng = random.Random(seed)
    offsets = [0.0]
    for _ in range(n - 1):
        offsets.append(offsets[-1] + rng.expovariate(rate))
    return offsets[:n]
