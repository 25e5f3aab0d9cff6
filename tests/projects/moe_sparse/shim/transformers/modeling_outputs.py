"""transformers.modeling_outputs, the one name moe/hf_wrapper.py imports."""

from dataclasses import dataclass
from typing import Any


@dataclass
class CausalLMOutputWithPast:
    loss: Any = None
    logits: Any = None
    past_key_values: Any = None
    hidden_states: Any = None
    attentions: Any = None
