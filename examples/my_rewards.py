"""An example of your own reward, named in a config as "examples.my_rewards:short"."""


def short(response, example, limit=200):
  """1 for a response of at most `limit` characters (`limit` is an option from the config)."""
  return float(len(response) <= limit), {"length": len(response)}
