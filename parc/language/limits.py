"""The sizes the parser reads at most, in a module of their own so that a writer of specs (parc
import's draft) keeps to them without loading the parser, lark and the parse table."""

MAX_INPUT = 1 << 20  # characters in one file (1 MiB of ASCII)
MAX_DEPTH = 64  # nesting of parentheses, lists, calls and signs in one value; of blocks
MAX_TOKEN = 4096  # characters in one string, name or number
