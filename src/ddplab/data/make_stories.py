"""Write stories.txt, the text the gpt recipe trains on by default: `python src/ddplab/data/make_stories.py`.

Short children's stories from a small grammar, generated with a fixed seed, so the file is the same every time.
Written for ddplab and dedicated to the public domain (CC0): nothing is downloaded or copied from elsewhere.
A character-level model learns its spelling, words and sentence patterns within a few hundred CPU steps.
"""

from __future__ import annotations

import random
from pathlib import Path

NAMES = [
    "Ada",
    "Ben",
    "Cleo",
    "Dan",
    "Eva",
    "Finn",
    "Gus",
    "Hana",
    "Ivo",
    "June",
    "Kai",
    "Lena",
    "Milo",
    "Nora",
    "Otto",
    "Pia",
    "Quinn",
    "Rosa",
    "Sam",
    "Tess",
    "Uma",
    "Vic",
    "Wren",
    "Yara",
    "Zed",
]
ANIMALS = [
    "cat",
    "dog",
    "fox",
    "owl",
    "duck",
    "frog",
    "goat",
    "mouse",
    "rabbit",
    "horse",
    "bear",
    "crow",
    "hen",
    "pig",
    "sheep",
    "squirrel",
]
PLACES = [
    "the garden",
    "the forest",
    "the river",
    "the old barn",
    "the hill",
    "the market",
    "the beach",
    "the library",
    "the kitchen",
    "the meadow",
    "the bridge",
    "the village square",
    "the orchard",
    "the train station",
    "the lighthouse",
    "the pond",
]
THINGS = [
    "a red ball",
    "a small key",
    "a blue kite",
    "a wooden box",
    "a shiny stone",
    "a lost hat",
    "an old map",
    "a paper boat",
    "a jar of honey",
    "a green apple",
    "a silver bell",
    "a warm scarf",
    "a broken clock",
    "a bag of seeds",
    "a yellow umbrella",
    "a tiny drum",
]
ADJECTIVES = [
    "happy",
    "sleepy",
    "brave",
    "curious",
    "quiet",
    "clever",
    "kind",
    "shy",
    "busy",
    "hungry",
    "cheerful",
    "careful",
    "tired",
    "proud",
    "gentle",
    "silly",
]
WEATHER = [
    "The sun was warm.",
    "It was raining softly.",
    "The wind was cold.",
    "Snow covered the ground.",
    "The sky was grey and low.",
    "It was a bright spring morning.",
    "Fog hid the trees.",
    "The evening was calm and still.",
]
FEELINGS = ["glad", "surprised", "worried", "excited", "sad", "calm", "thankful", "proud"]
VERBS = ["found", "carried", "lost", "shared", "painted", "mended", "hid", "dropped", "opened", "cleaned"]
TIMES = [
    "One morning",
    "Once upon a time",
    "Long ago",
    "One evening",
    "On a Sunday",
    "Late one night",
    "In the middle of summer",
    "After breakfast",
    "Before the rain came",
    "One winter day",
]
SAYINGS = [
    "Let us try again tomorrow.",
    "I can help you with that.",
    "Look what I found!",
    "Where did it go?",
    "We should go home now.",
    "This is the best day ever.",
    "Can you keep a secret?",
    "Thank you for waiting.",
    "I think I know the way.",
    "Please be careful.",
]
ENDINGS = [
    "and they became good friends.",
    "and everyone laughed together.",
    "and they walked home side by side.",
    "and the day ended with a warm supper.",
    "and nobody ever forgot it.",
    "and from then on they shared everything.",
    "and the {animal} slept well that night.",
    "and {name} smiled all the way home.",
]


def story(r: random.Random) -> str:
    name, friend = r.sample(NAMES, 2)
    animal, adjective, place = r.choice(ANIMALS), r.choice(ADJECTIVES), r.choice(PLACES)
    thing, verb, feeling = r.choice(THINGS), r.choice(VERBS), r.choice(FEELINGS)
    lines = [f"{r.choice(TIMES)}, {name} went to {place} with a {adjective} {animal}.", r.choice(WEATHER)]
    lines.append(f"There {name} {verb} {thing}.")
    if r.random() < 0.6:
        lines.append(f'"{r.choice(SAYINGS)}" said {name}.')
        lines.append(f'"{r.choice(SAYINGS)}" said {friend}, who had followed them.')
    if r.random() < 0.5:
        count = r.randint(2, 9)
        lines.append(f"They counted {count} birds on the fence, then {count + 1}, then {count + 2}.")
    lines.append(f"The {animal} felt {feeling}, because {thing} was just what it needed.")
    if r.random() < 0.4:
        other = r.choice([p for p in PLACES if p != place])
        lines.append(f"Later they ran to {other} and looked for more.")
    lines.append(f"In the end {name} gave {thing} to {friend}, " + r.choice(ENDINGS).format(animal=animal, name=name))
    return " ".join(lines)


def main(target_bytes: int = 240_000) -> None:
    r = random.Random(20261202)
    parts, size = [], 0
    while size < target_bytes:
        text = story(r)
        parts.append(text)
        size += len(text) + 2
    Path(__file__).with_name("stories.txt").write_text("\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
