"""Errors a user can cause. The message is one sentence shown without a traceback."""

NAME = 80   # characters of a user's text (a model name, a folder, a URL) shown back in a sentence


class UserError(Exception):
    pass


def clip(text: object, limit: int = NAME) -> str:
    """A user's text for an error sentence, as written but cut to a short prefix: a
    sentence that echoed a 100,000-character name would be that name."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"
