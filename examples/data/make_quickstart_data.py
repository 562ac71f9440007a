"""Make the two small sources of examples/quickstart.yaml (deterministic; the outputs are committed).

Usage: python examples/data/make_quickstart_data.py
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

HERE = Path(__file__).parent

GENERAL = [
    ("Explain in two sentences why {x}.", ["the sky is blue", "leaves change colour in autumn", "bread rises",
     "ice floats on water", "cats purr", "the moon has phases", "we dream", "coffee keeps people awake",
     "tides happen", "onions make people cry", "rainbows form", "birds migrate", "metal feels cold",
     "the sea is salty", "thunder follows lightning", "yawning is contagious", "bees make honey",
     "stars twinkle", "paper turns yellow", "salt melts ice"]),
    ("Give three tips for {x}.", ["learning a new language", "sleeping better", "saving money", "writing clearly",
     "running a first marathon", "keeping houseplants alive", "cooking rice", "public speaking",
     "travelling light", "studying for exams", "staying focused", "making friends in a new city",
     "reducing food waste", "a job interview", "starting a garden", "reading more books"]),
    ("Write a short poem about {x}.", ["the ocean", "a rainy Monday", "an old bicycle", "the first snow",
     "a lighthouse", "a city at night", "a cup of tea", "mountains", "a lost key", "spring"]),
    ("Summarize the plot of a story about {x} in three sentences.", ["a dragon who is afraid of fire",
     "a robot learning to paint", "two rival bakers", "a detective who cannot smell", "a town without music",
     "a girl who talks to trees", "a lost astronaut", "a clockmaker's apprentice"]),
]
CODE = [
    ("Write a Python function that {x}.", ["reverses a string", "checks whether a number is prime",
     "merges two sorted lists", "counts the vowels in a sentence", "returns the n-th Fibonacci number",
     "flattens a nested list", "removes duplicates from a list while keeping order", "computes a factorial",
     "finds the longest word in a sentence", "converts Celsius to Fahrenheit", "checks for a palindrome",
     "groups words by their first letter", "computes the median of a list", "parses a CSV line",
     "validates an email address with a regex", "rotates a matrix by 90 degrees"]),
    ("What does this {x} code do?\n```\n{y}\n```", None),
    ("Fix the bug in this Python snippet:\n```python\n{y}\n```", None),
]
SNIPPETS = [
    ("JavaScript", "const xs = [3, 1, 2].sort((a, b) => a - b);"),
    ("Python", "print(sum(i * i for i in range(10)))"),
    ("Bash", "for f in *.txt; do wc -l \"$f\"; done"),
    ("SQL", "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 3;"),
    ("Rust", "let v: Vec<i32> = (1..5).map(|x| x * 2).collect();"),
    ("Go", "for i := 0; i < 3; i++ { fmt.Println(i) }"),
]
BUGGY = ["def add(a, b):\n    return a - b", "for i in range(10)\n    print(i)", "items = [1, 2, 3]\nprint(items[3])",
         "def mean(xs):\n    return sum(xs) / len(xs) if xs else sum(xs) / 0", "name = 'Ada'\nprint('Hello ' + nme)"]
MATH = "What is {a} {op} {b}? Show your steps."
WORD = [
    "A train travels {a} km in {b} hours. What is its average speed in km/h?",
    "Sara has {a} apples and gives away {b}. How many are left?",
    "A rectangle is {a} cm long and {b} cm wide. What is its area?",
    "If {a} workers build a wall in {b} days, how long would twice as many workers take?",
]


def alpaca_rows(rng: random.Random) -> list[dict]:
    rows = []
    for template, xs in GENERAL:
        rows += [{"instruction": template.format(x=x), "input": "", "output": ""} for x in xs]
    rows += [{"instruction": CODE[0][0].format(x=x), "input": "", "output": ""} for x in CODE[0][1]]
    rows += [{"instruction": CODE[1][0].format(x=lang, y=code), "input": "", "output": ""} for lang, code in SNIPPETS]
    rows += [{"instruction": CODE[2][0].format(y=code), "input": "", "output": ""} for code in BUGGY]
    for a, b in itertools.islice(((rng.randint(11, 999), rng.randint(2, 99)) for _ in itertools.count()), 60):
        rows.append({"instruction": MATH.format(a=a, op=rng.choice(["+", "-", "*"]), b=b), "input": "", "output": ""})
    for i in range(60):
        word = WORD[i % len(WORD)].format(a=rng.randint(20, 400), b=rng.randint(2, 12))
        rows.append({"instruction": word, "input": "", "output": ""})
    rng.shuffle(rows)
    return rows


def chat_rows(rng: random.Random) -> list[dict]:
    rows = []
    topics = ["photosynthesis", "binary search", "the French revolution", "compound interest", "black holes",
              "recursion", "the water cycle", "vaccines", "prime numbers", "HTTP caching", "volcanoes", "sorting"]
    for i, topic in enumerate(topics * 3):
        messages = []
        if i % 3 == 0:
            messages.append({"role": "system", "content": "You are a patient teacher. Answer briefly."})
        messages.append({"role": "user", "content": f"What is {topic}?"})
        if i % 2 == 0:
            messages.append({"role": "assistant", "content": "(original answer, regenerated by the target)"})
            where = "" if i < 12 else " from daily life" if i < 24 else " for a child"
            messages.append({"role": "user", "content": f"Give one example of {topic}{where}."})
        rows.append({"id": f"chat-{i:03d}", "messages": messages})
    return rows


def main() -> None:
    rng = random.Random(0)
    (HERE / "quickstart_alpaca.json").write_text(json.dumps(alpaca_rows(rng), indent=1) + "\n")
    with open(HERE / "quickstart_chat.jsonl", "w") as f:
        for row in chat_rows(rng):
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
