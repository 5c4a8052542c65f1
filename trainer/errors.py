"""Errors raised on the workers that are the user's to fix (missing data files)."""


class DatasetNotFound(Exception):  # noqa: N818 - reads better at the raise site
    """Dataset files are missing; the message says where we looked and what is expected."""


class ModelNotPackaged(Exception):  # noqa: N818
    """A trial's model could not be saved in an allowed format; the trial's record stands."""
