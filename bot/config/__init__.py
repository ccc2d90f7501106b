"""Reading opsloop.toml: the one config reader (`reader`) and the bot's settings (`settings`)."""
