"""Turn titles into URL slugs."""

import re


def slugify(title: str) -> str:
    """'Hello, World!' -> 'hello-world': lower case, words joined by single hyphens."""
    words = re.split(r"\W+", title)
    return "-".join(words).lower()
