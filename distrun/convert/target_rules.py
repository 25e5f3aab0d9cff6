"""The rules of the conversion targets (`targets/<family>.py`): accelerate, DeepSpeed,
FSDP2. Part of the registry in rules.py, which adds them to the transforms' rules.

Importing this module costs nothing: no libcst, no torch.
"""

from __future__ import annotations

TARGET_RULES: tuple[tuple[str, str], ...] = (
    ("accelerate.prepare", "The model, its optimizer and the loaders built before go "
     "through `accelerator.prepare`."),
    ("accelerate.prepare_loader", "A training DataLoader goes through "
     "`accelerator.prepare`."),
    ("accelerate.backward", "`loss.backward()` becomes `accelerator.backward(loss)`."),
    ("accelerate.apex_amp", "apex with --amp fp16|bf16: the Accelerator's mixed precision "
     "cannot take apex's scaled loss."),
    ("deepspeed.one_model", "DeepSpeed needs one model trained by one optimizer."),
    ("deepspeed.cpu_batches", "A script that names no GPU keeps its batches on the CPU "
     "while DeepSpeed puts its model on the GPU where there is one: warned."),
    ("deepspeed.updated_by_hand", "A model updated without an optimizer cannot become a "
     "DeepSpeed engine."),
    ("deepspeed.optimizer_out_of_reach", "The optimizer cannot be reached where the "
     "engine is made."),
    ("deepspeed.engine_out_of_reach", "A backward, step or resume runs where no engine "
     "can be reached."),
    ("deepspeed.backward", "`loss.backward()` becomes `engine.backward(loss)`."),
    ("deepspeed.step", "`optimizer.step()` becomes `engine.step()`."),
    ("deepspeed.zero_grad", "`optimizer.zero_grad()` goes through the engine."),
    ("deepspeed.local_rank_argument", "The script's parser accepts the launcher's "
     "--local_rank."),
    ("deepspeed.apex", "apex cannot move into a DeepSpeed config."),
    ("deepspeed.amp_in_code", "Mixed precision written in code: under DeepSpeed it is "
     "set in ds_config.json."),
    ("deepspeed.untraced_resume", "The optimizer's state is loaded from a file distrun "
     "cannot trace."),
    ("deepspeed.clipping", "clip_grad_norm_ moves into gradient_clipping."),
    ("deepspeed.grad_accum", "Gradient accumulation keeps the script's condition "
     "(managed_gradient_accumulation false)."),
    ("deepspeed.micro_batch", "train_micro_batch_size_per_gpu read from the script."),
    ("deepspeed.config_base", "The user's DeepSpeed config (named by the script's option, or "
     "beside it) is the base of the one written."),
    ("deepspeed.config_named", "The script's own option names the DeepSpeed config: the "
     "converted script reads the one it names."),
    ("deepspeed.config_merge", "A key of the written config that distrun adds, changes or "
     "removes in the user's."),
    ("deepspeed.config_kept", "A value of the user's config kept where distrun alone would "
     "write another."),
    ("deepspeed.config_optimizer", "The user's config names an optimizer DeepSpeed will not "
     "use: the script's own is given to it."),
    ("deepspeed.config_scheduler", "The user's config sets a scheduler (refused when the "
     "script steps one of its own)."),
    ("deepspeed.config_comments", "The user's config had comments the written JSON does not "
     "keep."),
    ("deepspeed.config_check", "A problem `config validate` finds in the config written."),
    ("deepspeed.config_ambiguous", "Several DeepSpeed configs beside the script, none named: "
     "refused."),
    ("deepspeed.config_unreadable", "The user's DeepSpeed config is not a JSON object: "
     "refused."),
    ("deepspeed.config_replaced", "--force replaces a config the conversion did not merge "
     "from: the keys it loses or changes."),
    ("deepspeed.config_zero3_eval", "The user's config sets ZeRO-3 and --eval shard was "
     "given: refused."),
    ("deepspeed.untested_optimizer", "zero_allow_untested_optimizer for an optimizer "
     "DeepSpeed does not test under ZeRO."),
    ("deepspeed.checkpoint_save", "Every rank also saves the engine's checkpoint beside "
     "the optimizer's state."),
    ("deepspeed.checkpoint_load", "The optimizer's state is loaded through "
     "`engine.load_checkpoint`."),
    ("deepspeed.zero3_gather", "ZeRO-3: the weights are gathered around a state_dict "
     "or load_state_dict."),
    ("deepspeed.zero3_optimizer_state", "ZeRO-3: the optimizer's state exists only as "
     "shards."),
    ("deepspeed.zero3_plain_module", "ZeRO-3: a save of the whole module saves a plain "
     "module of its class holding the gathered full weights."),
    ("deepspeed.zero3_every_rank", "ZeRO-3: a function of the script called in a saved "
     "object that reads the model's weights runs on every rank, before the save."),
    ("deepspeed.zero3_whole_model", "ZeRO-3: the whole model in an object built before its "
     "save is refused."),
    ("deepspeed.zero3_parameters", "ZeRO-3: parameters read outside a forward pass are "
     "empty."),
    ("fsdp.one_model", "FSDP2 conversion needs one model trained by one optimizer."),
    ("fsdp.updated_by_hand", "A model updated without an optimizer cannot be sharded."),
    ("fsdp.shard", "The model is sharded with fully_shard (each repeated block, then the "
     "root) before its optimizer."),
    ("fsdp.mixed_precision", "--amp bf16 becomes FSDP2's MixedPrecisionPolicy."),
    ("fsdp.forward_method", "A method that calls self.forward() is registered with "
     "FSDP2."),
    ("fsdp.no_blocks", "No repeated blocks: only the root is sharded."),
    ("fsdp.shard_unknown", "--shard names a class that does not build the model: refused."),
    ("fsdp.shard_unseen", "--shard names a class the script does not show (a library "
     "builds the model)."),
    ("fsdp.memory", "The memory the sharding saves, from the parameter count."),
    ("fsdp.model_out_of_reach", "The model cannot be reached where its optimizer is "
     "built."),
    ("fsdp.optimizer_in_loop", "The optimizer is built inside a loop."),
    ("fsdp.half_weights", "The model is cast to half precision."),
    ("fsdp.model_rebound", "The model is bound again after its optimizer is built."),
    ("fsdp.tied_blocks", "Parameters tied across the blocks sharded one by one."),
    ("fsdp.full_state_dict", "A state_dict of the sharded model becomes the full state "
     "dict on rank 0."),
    ("fsdp.load_state", "A state is loaded into the sharded model from rank 0's full "
     "state."),
    ("fsdp.plain_module", "A save of the whole sharded module saves a plain module of its "
     "class holding the full weights."),
    ("fsdp.state_every_rank", "A function of the script called in a saved object that "
     "reads the model's state runs on every rank, before the save."),
    ("fsdp.whole_model_save", "The whole sharded model in an object built before its save "
     "is refused."),
    ("fsdp.clip_grad_norm", "The norm clip_grad_norm_ returns is a DTensor: made a full "
     "tensor."),
)
