"""The errors of :mod:`disq.config`: a file Disque would refuse, a refused CONFIG command,
a value one option's parser refuses."""

from __future__ import annotations


class ConfigFileError(Exception):
    """A configuration file that Disque would refuse to start with.

    ``str(err)`` is the text Disque prints on stderr before exiting; ``path`` and ``line_number``
    say where (``path`` is None for the command-line options string).
    """

    code = "CONFIG_FILE"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        path: str | None = None,
        line_number: int | None = None,
        line: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message
        self.path = path
        self.line_number = line_number
        self.line = line

    @classmethod
    def at_line(cls, path: str | None, line_number: int, line: str, reason: str) -> ConfigFileError:
        text = (
            "\n*** FATAL CONFIG FILE ERROR ***\n"
            f"Reading the configuration file, at line {line_number}\n"
            f">>> '{line}'\n"
            f"{reason}"
        )
        return cls(text, reason=reason, path=path, line_number=line_number, line=line)


class ConfigCommandError(Exception):
    """A CONFIG command refused; ``str(err)`` is the RESP error line without the leading '-'."""


class ConfigSetError(ConfigCommandError):
    pass


class ConfigRewriteError(ConfigCommandError):
    pass


class _Invalid(Exception):
    """A value refused by one option's parser; the reason is Disque's text for the file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Unsupported(_Invalid):
    """A well-formed value disq cannot honour: the reason is the whole message (a file error's
    last line, CONFIG SET's ``-ERR <reason>``), never the generic "Invalid argument"."""
