"""Errors a user can cause. The message is one sentence shown without a traceback."""


class UserError(Exception):
    pass
