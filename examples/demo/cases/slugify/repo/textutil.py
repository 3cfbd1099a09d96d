"""Text helpers for URLs."""


def slugify(text):
    """Return a lowercase URL slug: words joined by single hyphens, punctuation dropped."""
    return text.lower().replace(" ", "-")
