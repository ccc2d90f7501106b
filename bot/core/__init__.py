"""The ground floor: types, errors, redaction, prices and wording every layer shares. It imports
nothing of ours outside bot/core/."""
