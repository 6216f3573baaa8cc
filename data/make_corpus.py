#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the small training corpora shipped in data/ (original text, generated; no downloads).

    python3 data/make_corpus.py            # rewrites data/stories.txt and data/qa.txt

The text comes from a few hand-written sentence templates filled from fixed word lists by a
64-bit xorshift generator with a fixed seed, so the output is identical on every machine and
Python version. stories.txt (pretraining) is short stories about a small village; qa.txt
(fine-tuning) is a question/answer format over the same world: a different domain that shares
the vocabulary, so a LoRA fine-tune of a model pretrained on stories.txt has something to learn.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Rng:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFFFFFFFFFF or 1

    def next(self):
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 7
        s ^= (s << 17) & 0xFFFFFFFFFFFFFFFF
        self.s = s
        return s

    def below(self, n):
        return self.next() % n

    def pick(self, xs):
        return xs[self.below(len(xs))]


NAMES = [("Mira", "she", "her"), ("Tomas", "he", "his"), ("Ada", "she", "her"), ("Bruno", "he", "his"),
         ("Lena", "she", "her"), ("Oskar", "he", "his"), ("Nia", "she", "her"), ("Pavel", "he", "his"),
         ("Juno", "she", "her"), ("Emil", "he", "his"), ("Rosa", "she", "her"), ("Ivo", "he", "his")]
PLACES = ["the mill", "the river", "the market", "the old bridge", "the orchard", "the bakery", "the hill",
          "the school", "the harbor", "the forest path", "the well", "the library"]
THINGS = [("apple", "apples"), ("stone", "stones"), ("feather", "feathers"), ("basket", "baskets"),
          ("lantern", "lanterns"), ("kite", "kites"), ("coin", "coins"), ("shell", "shells"),
          ("book", "books"), ("cup", "cups"), ("pear", "pears"), ("ribbon", "ribbons")]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "silver"]
ADJS = ["small", "heavy", "old", "bright", "round", "smooth", "tiny", "warm"]
TIMES = ["In the morning", "At noon", "In the evening", "Before dawn", "After lunch", "On a windy day",
         "On a rainy day", "Late at night"]
FEELINGS = ["happy", "tired", "curious", "proud", "quiet", "hungry", "glad", "sleepy"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
           "nineteen", "twenty"]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("early", "late"), ("full", "empty"),
             ("light", "heavy"), ("open", "closed"), ("fast", "slow"), ("near", "far"), ("old", "new")]


def count(n, thing):
    return f"{NUMBERS[n]} {thing[0] if n == 1 else thing[1]}"


def story(r):
    a, b = r.pick(NAMES), r.pick(NAMES)
    while b == a:
        b = r.pick(NAMES)
    place, thing, color, adj = r.pick(PLACES), r.pick(THINGS), r.pick(COLORS), r.pick(ADJS)
    n, m = 1 + r.below(9), 1 + r.below(9)
    s = [f"{r.pick(TIMES)}, {a[0]} walked to {place}."]
    article = "an" if adj[0] in "aeiou" else "a"
    s.append(f"There {a[1]} found {article} {adj} {color} {thing[0]}.")
    s.append(f"{a[0]} had {count(n, thing)}, and {b[0]} gave {a[2] if a[2] == 'her' else 'him'} {count(m, thing)} more.")
    s.append(f"Now {a[0]} has {count(n + m, thing)}.")
    if r.below(2):
        s.append(f"{b[0]} felt {r.pick(FEELINGS)}, so {b[1]} went home to {r.pick(PLACES)}.")
    else:
        k = r.below(n + m + 1)
        s.append(f"{a[0]} gave away {count(k, thing)} and kept {count(n + m - k, thing)}.")
    x, y = r.pick(OPPOSITES)
    s.append(f"The day was not {x}; it was {y}.")
    return " ".join(s)


def qa(r):
    kind = r.below(4)
    if kind == 0:
        n, m = r.below(11), r.below(11)
        return f"Q: What is {NUMBERS[n]} plus {NUMBERS[m]}?\nA: {NUMBERS[n].capitalize()} plus {NUMBERS[m]} is {NUMBERS[n + m]}."
    if kind == 1:
        n = 1 + r.below(20)
        m = r.below(n + 1)
        return f"Q: What is {NUMBERS[n]} minus {NUMBERS[m]}?\nA: {NUMBERS[n].capitalize()} minus {NUMBERS[m]} is {NUMBERS[n - m]}."
    if kind == 2:
        x, y = r.pick(OPPOSITES)
        if r.below(2):
            x, y = y, x
        return f"Q: What is the opposite of {x}?\nA: The opposite of {x} is {y}."
    a, thing, n, m = r.pick(NAMES), r.pick(THINGS), 1 + r.below(9), 1 + r.below(9)
    return (f"Q: {a[0]} has {count(n, thing)} and finds {count(m, thing)} at {r.pick(PLACES)}. "
            f"How many {thing[1]} does {a[1]} have?\nA: {a[0]} has {count(n + m, thing)}.")


def write(name, make, seed, size, sep):
    r = Rng(seed)
    parts, total = [], 0
    while total < size:
        p = make(r)
        parts.append(p)
        total += len(p) + len(sep)
    with open(os.path.join(HERE, name), "w", encoding="ascii", newline="\n") as f:
        f.write(sep.join(parts) + "\n")


if __name__ == "__main__":
    write("stories.txt", story, 0x5EED5, 256 * 1024, "\n\n")
    write("qa.txt", qa, 0x0A0A0, 64 * 1024, "\n\n")
