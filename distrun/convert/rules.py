"""Every rule of `distrun convert`, registered once: the id each change and finding of the
report carries, and what the rule does.

An id is `<family>.<rule>`. The family is the transform module that applies the rule
(`transforms/<family>.py`, its fixtures in tests/convert/fixtures/<family>/), or the
target whose vocabulary it is (`targets/<family>.py`), or `detect` (the gates that leave
a script unchanged), `verify` (checks of the converted text) and `notebook` (a
notebook's cells). `Plan.change` and
`Plan.finding` refuse an id that is not here; a test fails on an id used in the code and
not registered, registered and never used, or registered twice. `docs/rules.md` is
generated from this table (`python -m distrun.convert.rules_page > docs/rules.md`).

Importing this module costs nothing: no libcst, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from distrun.convert.target_rules import TARGET_RULES


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # what the rule does (a change) or reports (a finding), one sentence
    # reported, the conversion would train wrong (a model not wrapped, training data not
    # sharded): an error, nothing written unless --partial
    blocks: bool = False


# The findings that leave a model unwrapped or the training data unsharded.
BLOCKING = frozenset({
    "model.not_found", "model.no_forward", "model.unnamed_forward", "model.not_set",
    "model.no_wrapper_here", "data.no_loader", "data.own_sampler", "data.iterable_dataset",
    "data.unnamed_dataset", "data.unknown_loader", "old_launcher.no_sampler",
    "hazards.unfrozen_in_training",
})


_RULES: tuple[tuple[str, str], ...] = (
    # -- gates: the script is left unchanged ----------------------------------------
    ("detect.already_distributed", "The script already sets up torch.distributed (or "
     "accelerate, DeepSpeed): nothing is changed."),
    ("detect.spawns_processes", "The script starts its own processes (mp.spawn, "
     "multiprocessing): not converted; torchrun should start them."),
    ("detect.no_training", "No optimizer, DataLoader or backward() on a torch import: "
     "nothing to convert."),
    ("detect.options_not_applied", "A script already distributed (mp.spawn, the old "
     "launcher) is only completed: options that would change it are refused."),
    # -- device -------------------------------------------------------------------
    ("device.string", "A device string or torch.device('cuda') becomes the local rank's device."),
    ("device.cuda_call", "`.cuda()` becomes `.to(DEVICE)`, the local rank's device."),
    ("device.torch_device", "`torch.device('cuda', N)` becomes the local rank's device."),
    ("device.set_device", "`torch.cuda.set_device(...)` is removed: the set-up picks the "
     "local rank's GPU."),
    ("device.compare", "A test of the device against 'cuda' keeps working now that the "
     "device is 'cuda:N'."),
    ("device.gpu_index", "A GPU index set to 0 becomes the local rank."),
    ("device.cpu_script", "A script naming no GPU trains on the CPU, and so do its ranks."),
    ("device.backend", "In a script already distributed: NCCL only where there is CUDA, gloo "
     "on the CPU."),
    ("device.group_from_launcher", "In a script already distributed: a process group "
     "that depended on the GPU count depends on the launcher's process count."),
    ("device.local_device", "In a script already distributed: the rank's device uses become "
     "the local rank's GPU, or the CPU without one."),
    # -- data ---------------------------------------------------------------------
    ("data.sampler", "A training DataLoader gets a DistributedSampler (its shuffle moved "
     "there): each rank reads its share."),
    ("data.name_dataset", "A dataset built inside the DataLoader call is named first, so "
     "the sampler can see it."),
    ("data.unnamed_dataset", "The dataset is built inside the DataLoader call where it "
     "cannot be named: the loader is left unsharded."),
    ("data.set_epoch", "`set_epoch(epoch)` at the start of each epoch, so each epoch has "
     "a new order."),
    ("data.no_epoch_loop", "No epoch loop found around a training loop: no set_epoch placed."),
    ("data.no_epoch_variable", "No epoch variable to reshuffle with."),
    ("data.rebuild_loader", "A training loader built where no DataLoader call shows is "
     "rebuilt sharded before it is used."),
    ("data.sampler_with_replacement", "A sampler drawing with replacement: each rank "
     "draws its own share from a generator seeded with its rank."),
    ("data.sampler_count", "A sampler's number of samples computed from the loader's batch "
     "size (steps x batch): x WORLD_SIZE, so the ranks share out the original's steps."),
    ("data.same_generator", "numpy's or Python's generator, never seeded: rank 0's state on "
     "every rank after the set-up."),
    ("data.same_split", "A random choice of data made once without a seed (a split, a "
     "shuffle, k-fold folds) is rank 0's on every rank."),
    ("data.share_sampler", "A training loader's own sampler (SubsetRandomSampler...): "
     "every rank draws its order alike and takes its share."),
    ("data.whole_batches", "A batch sampler grouping its batches by class (episodes): each "
     "rank takes whole batches of rank 0's."),
    ("data.share_batch_sampler", "A training loader's own batch_sampler: every rank takes "
     "rank 0's batches and keeps its share of each (the global batch stays the original's)."),
    ("data.phase_loaders", "One DataLoader call making the loader of every phase (a dict "
     "by phase): only the training phase's is sharded."),
    ("data.rank_batches", "Batches a generator or class of the script makes: rank 0 makes "
     "them, each rank trains on one of every WORLD_SIZE in a row."),
    ("data.rank_slices", "Batches cut by hand (`X[i:i + bs]`): the ranks split each one."),
    ("data.own_sampler", "A training DataLoader with its own sampler was not sharded."),
    ("data.iterable_dataset", "A DataLoader over an IterableDataset was not sharded."),
    ("data.mixed_helper", "A helper builds training and evaluation loaders: the training "
     "one is sharded where it is used."),
    ("data.statistics_pass", "A DataLoader read only by a pass that does not train "
     "(statistics of the data set) stays whole on every rank."),
    ("data.eval_unsharded", "An evaluation DataLoader stays whole: every rank evaluates "
     "the full set, so metrics are exact."),
    ("data.unknown_loader", "A DataLoader that may or may not feed training was left "
     "unsharded."),
    ("data.no_loader", "No DataLoader found: batches built by hand are not sharded."),
    ("data.full_batch", "Every training forward pass reads whole tensors: every rank "
     "computes the whole data's gradient (the original's training, no speed-up)."),
    ("data.random_draws_unseeded", "Draws from a module the loop's file does not bind: warned."),
    ("data.random_draws", "Each step draws its samples at random (no DataLoader): the "
     "generator is reseeded by rank before the loop, so each rank draws its own."),
    ("data.measured_on_shard", "A function measuring on the training loader sees a share "
     "(reported); a library's measure (`update_bn`) is given the whole set."),
    ("data.whole_for_measures", "A loader helper that shards for training, called where "
     "nothing trains (an evaluation, a Fisher estimate): that call reads the set whole."),
    ("data.progress", "Progress counted against the whole dataset ends near 1/WORLD_SIZE."),
    ("data.whole_count", "A count of all the batches dealt out by rank: not a rank's steps."),
    ("data.schedule_share", "A schedule's step count from `len(dataset)`: this rank's share."),
    ("data.train_metrics", "Sums of a training loop's metrics read after it are all-reduced "
     "there: the whole batch's values, as on one process."),
    ("data.train_metrics_shard", "A training loop's metric read after it stays rank 0's "
     "share (its terms are of no known kind)."),
    # -- model --------------------------------------------------------------------
    ("model.checkpoint_reentrant", "Activation checkpointing in its reentrant form, in a "
     "model DDP searches for unused parameters: made `use_reentrant=False`."),
    ("model.find_unused", "A layer the model builds and never uses, or whose output no "
     "kept value depends on: DDP is made with find_unused_parameters=True."),
    ("model.wrap", "The model's wrapper (DDP object, accelerate's, DeepSpeed engine) is "
     "made after the model is built."),
    ("model.forward", "A training forward pass calls the wrapper, so gradients are "
     "averaged across ranks."),
    ("model.pass_wrapper", "A function that trains the model it is given now gets the wrapper."),
    ("model.unwrap", "Inside such a function, other uses reach the model inside the "
     "wrapper."),
    ("model.dataparallel", "nn.DataParallel is removed (DistributedDataParallel replaces "
     "it)."),
    ("model.dataparallel_module", "`model.module` reads the model itself once "
     "DataParallel is gone."),
    ("model.dataparallel_keys", "A state read through a removed DataParallel wrapper "
     "keeps its `module.` keys; one loaded into it loses them."),
    ("model.dataparallel_type_check", "`DataParallel` in a type check becomes DDP."),
    ("model.sync_bn", "--sync-bn: BatchNorm layers become SyncBatchNorm on GPU."),
    ("model.sync_bn_already", "--sync-bn: the script already uses SyncBatchNorm: no "
     "second conversion."),
    ("model.sync_bn_nothing", "--sync-bn: a model with no BatchNorm layer (refused when "
     "no model has one)."),
    ("model.not_found", "No model found: no optimizer is built from a model's parameters."),
    ("model.no_forward", "No training forward pass of a model found: it was not wrapped."),
    ("model.hand_average", "No forward pass to wrap, or a training call of another "
     "method of the model around its forward: gradients averaged by hand at steps."),
    ("model.side_forward", "A training call of another method of the model that runs its "
     "forward, where gradients cannot be averaged by hand (a target other than DDP): an "
     "error."),
    ("model.unnamed_forward", "A training forward pass through an expression that "
     "cannot hold a wrapper (`models[i](x)`)."),
    ("model.not_set", "Where the model is trained is known, not where it is set: not "
     "wrapped."),
    ("model.no_wrapper_here", "A model passed to a function that trains it has no "
     "wrapper where it is passed."),
    ("model.global_of_module", "A model that is a global of an imported module is "
     "wrapped when that module is imported."),
    # -- training loop, precision -------------------------------------------------
    ("evaluation.shard", "--eval shard: an evaluation loader reads every WORLD_SIZE-th "
     "sample."),
    ("evaluation.all_reduce", "--eval shard: the loop's sums are all-reduced after it."),
    ("evaluation.buffers", "--eval shard: rank 0's buffers are broadcast before the "
     "sharded evaluation."),
    ("evaluation.left_whole", "--eval shard: a loader whose loop does not sum its "
     "metrics is left whole."),
    ("evaluation.no_loader", "--eval shard: the script has no evaluation loader: refused."),
    ("loss.sum_reduction", "A loss summed over the batch: its scale now depends on the "
     "per-rank batch."),
    ("model.taken_gradients", "Gradients of the parameters taken by hand over the batch "
     "(`torch.autograd.grad`) are averaged over the ranks."),
    ("model.free_tensors", "An optimizer of tensors listed by hand, stepped beside the "
     "model's: its gradients are averaged over the ranks by hand."),
    ("batch_loss.memory", "A memory of the batch's items kept across steps (a queue of "
     "negatives): the new items are gathered from every rank first."),
    ("loss.batch_sum", "A loss summed over the batch by `.sum()`: the sum is scaled by "
     "WORLD_SIZE while differentiated; a penalty beside it keeps its weight."),
    ("loss.count_divisor", "A loss divided by a count taken over the batch (matched "
     "anchors, tokens that are not padding): the count is averaged over the ranks, so the "
     "averaged gradients are the single process's."),
    ("agreed.exit", "A loop left on a rank's own training value (`if loss < eps: "
     "break`): the value is averaged over the ranks first, so every rank leaves at the same "
     "step."),
    ("agreed.scheduler", "A ReduceLROnPlateau stepped on a rank's own loss: the "
     "value is averaged over the ranks first, so every rank keeps the same learning rate."),
    ("agreed.kept", "A checkpoint saved on a test of a rank's own training value (the best "
     "loss): the value is averaged over the ranks first."),
    ("retained_graph.average", "A second backward pass through a graph kept from the first "
     "(retain_graph=True): DDP averaged at the first, so the model's gradients are averaged "
     "by hand before its optimizer steps."),
    ("batch_loss.gather", "A loss over the whole batch (in-batch negatives, batch "
     "statistics) gets every rank's batch, through the differentiable all_gather."),
    ("batch_loss.per_rank", "A loss over the whole batch that each rank computes over its "
     "own share: reported with the fix."),
    ("amp.modernise", "Deprecated torch.cuda.amp forms become torch.autocast / "
     "torch.amp.GradScaler."),
    ("amp.autocast", "--amp fp16|bf16: the forward pass and loss go under "
     "torch.autocast."),
    ("amp.autocast_missed", "--amp: the forward pass could not be put under autocast."),
    ("amp.grad_scaler", "--amp fp16: a GradScaler (enabled with CUDA only)."),
    ("amp.scaler_step", "--amp fp16: `optimizer.step()` goes through the GradScaler."),
    ("amp.no_backward", "--amp fp16|bf16: no forward pass could be put under autocast: "
     "refused."),
    ("amp.fp16_on_cpu", "--amp fp16 on a script that trains on the CPU (it names no GPU): "
     "refused, float16 autocast and its GradScaler run on CUDA."),
    ("amp.remove_autocast", "Autocast removed (--amp none, or the target sets the "
     "precision)."),
    ("amp.remove_scaler", "GradScaler removed, or disabled where its state is used (--amp "
     "none or bf16, or the target sets the precision)."),
    ("amp.dtype", "--amp fp16|bf16 on a script that autocasts already: its autocast runs "
     "in the dtype asked for."),
    ("amp.already", "--amp fp16|bf16: the script already autocasts in that dtype: kept."),
    ("amp.nothing_to_remove", "--amp none: the script has no mixed precision to remove."),
    ("amp.apex_initialize", "apex `amp.initialize` becomes torch.amp."),
    ("amp.apex_scale_loss", "apex `amp.scale_loss` becomes `scaler.scale(loss)`."),
    ("amp.apex_scale_loss_alone", "apex `amp.scale_loss` without `amp.initialize` in "
     "the script."),
    ("amp.apex_scale_loss_outside_with", "apex `amp.scale_loss` outside a `with`: not "
     "migrated."),
    ("amp.apex_scaler_scope", "The loss is scaled outside the function that makes the "
     "GradScaler."),
    ("amp.apex_o3", "apex O3 became fp16 autocast with fp32 weights."),
    ("amp.apex_state", "apex's state_dict / load_state_dict become the GradScaler's."),
    ("amp.apex_syncbn", "apex convert_syncbn_model becomes torch's SyncBatchNorm."),
    ("amp.apex_import", "apex imports removed."),
    ("grad_accum.no_sync", "--grad-accum-no-sync: micro-steps that do not step skip the "
     "gradient all-reduce."),
    ("grad_accum.condition", "--grad-accum-no-sync: a loop whose micro-steps cannot skip "
     "the all-reduce (refused when no loop can)."),
    ("grad_accum.none_found", "--grad-accum-no-sync: no loop steps under a condition: "
     "refused."),
    ("scale_lr.scaled", "--scale-lr: the learning rate is multiplied by WORLD_SIZE."),
    ("scale_lr.default_lr", "--scale-lr: an optimizer's default learning rate is written "
     "out, multiplied by WORLD_SIZE."),
    ("scale_lr.scheduler", "--scale-lr: the rates OneCycleLR and CyclicLR set are "
     "multiplied by WORLD_SIZE."),
    ("scale_lr.param_group", "--scale-lr: a learning rate set by hand in a parameter group "
     "is multiplied by WORLD_SIZE."),
    ("scale_lr.no_lr", "--scale-lr: the script builds no optimizer: refused."),
    ("scale_lr.unreadable", "--scale-lr: a learning rate that cannot be read: refused."),
    # -- output, files, agreement between ranks ------------------------------------
    ("checkpoint.rank0_save", "A checkpoint is saved by rank 0 only, then every rank "
     "waits for it."),
    ("checkpoint.map_location", "`torch.load` maps onto the rank's own device."),
    ("checkpoint.cache_first", "A file made when missing (`if not os.path.exists(p): make; "
     "save`) is made by rank 0 first; the other ranks wait, then read it."),
    ("output.hydra_run_folder", "`@hydra.main`: the other ranks write no `.hydra/` "
     "configuration and no job log in Hydra's run folder."),
    ("output.rank0", "Printing and logging on rank 0 only."),
    ("output.print_value", "`print` handed on as a value (`trace_func=print`) prints on "
     "rank 0 only."),
    ("output.rank0_unguarded", "Output that cannot be taken out of its line stays on "
     "every rank."),
    ("output.rank0_file", "A file written by every rank is written by rank 0 only."),
    ("output.rank0_object", "A logger object (SummaryWriter, a tracker's run) is made on "
     "rank 0 only; the other ranks hold a stand-in that answers every use."),
    ("output.rank0_folder", "The folder of a writer made on rank 0 only is read: rank 0's "
     "is sent to every rank (or the read is reported)."),
    ("output.log_file", "A log file every rank opens: the others open it only to log "
     "an error, and append where it was truncated."),
    ("output.error_line", "Output that says why the script stops stays on every rank."),
    ("output.progress_bar", "A progress bar is shown on rank 0 only."),
    ("output.wandb", "wandb is disabled on every rank but 0."),
    ("directories.exist_ok", "Directories are made with exist_ok=True: every rank makes "
     "them, none fails."),
    ("directories.dir_fd", "`os.mkdir(..., dir_fd=...)` run by every rank: all but the "
     "first fail."),
    ("download.rank0_call", "A function of the script that downloads files by hand runs "
     "on rank 0 only, its result sent to every rank."),
    ("download.rank0_first", "Rank 0 downloads the dataset first; the others then read it."),
    ("download.when_missing", "A file downloaded by hand when it is missing: rank 0 runs "
     "that `if` first, the others then find the file."),
    ("rank0_values.broadcast", "A run name from the clock or a random id is rank 0's on "
     "every rank."),
    ("rank0_values.imported", "A clock read when a module is imported is rank 0's on every rank."),
    ("hazards.batchnorm", "BatchNorm statistics are per rank."),
    ("hazards.per_sample_state", "State kept per sample of the data set, written at the "
     "batch's indices in training: each rank holds its own samples' only (warned)."),
    ("hazards.lr_from_batch", "A learning rate computed from the batch size: now one "
     "rank's batch, not the global one (info; --scale-lr)."),
    ("hazards.batch_statistics", "A batch normalisation written by hand: its statistics are "
     "per rank."),
    ("hazards.batch_mix", "Samples mixed with others of their batch (mixup, CutMix) are "
     "mixed within each rank's share."),
    ("hazards.full_batch", "LBFGS usually trains on the full batch: sharding changes its "
     "steps."),
    ("hazards.iterable_dataset", "An IterableDataset must shard itself in __iter__."),
    ("hazards.unfrozen_in_training", "Parameters frozen before training and unfrozen in "
     "it are not synced by the DDP object made while they were frozen."),
    ("hazards.cuda_visible_devices", "The script sets CUDA_VISIBLE_DEVICES: every rank "
     "would see the same GPUs."),
    ("file_ops.link_barrier", "A link (`os.symlink`, `Path.symlink_to`) made by rank 0 "
     "only, then a barrier every rank reaches, so none reads through it before it exists."),
    ("file_ops.rank0", "A shared file removed, renamed, moved or copied by rank 0 only."),
    ("file_ops.unguarded", "The same on a line with other statements: reported."),
    ("file_ops.rank0_write", "A file written by a library (np.save, df.to_csv) by rank 0 only."),
    ("file_ops.read_back", "The same when the script reads the file back: reported."),
    # -- set-up ---------------------------------------------------------------------
    ("setup.process_group", "The process group (or the Accelerator) is set up."),
    ("setup.teardown", "`destroy_process_group()` when the script ends."),
    ("setup.library_module", "A file that only defines things gets no process group: "
     "convert the script that runs it."),
    ("old_launcher.local_rank", "A script for torch.distributed.launch reads its local "
     "rank from LOCAL_RANK too."),
    ("old_launcher.apex_ddp", "apex's DistributedDataParallel becomes torch's."),
    ("old_launcher.no_sampler", "A script for the old launcher has no "
     "DistributedSampler."),
    ("old_launcher.no_set_epoch", "A script for the old launcher never calls "
     "set_epoch."),
    ("spawned.one_worker_per_process", "mp.spawn(worker, ...) becomes one call of the "
     "worker per process, with its rank and the job's size from the launcher."),
    ("spawned.launcher_rendezvous", "MASTER_ADDR/MASTER_PORT written in the script give "
     "way to the launcher's."),
    ("spawned.launcher_rank", "A rank or world size the script computes itself for its "
     "process group or sampler becomes the launcher's."),
    ("spawned.not_a_statement", "An mp.spawn call that is not a statement of its own is "
     "left unconverted."),
    ("notebook.magic", "A notebook's shell command or magic is commented out."),
    ("project.own_package", "The entry imports its own package by name (`from pkg.utils "
     "import ...` run from inside pkg/): the package's modules are converted with it, the "
     "folder above the package is the project's top."),
    ("verify.undefined_name", "The converted text would read a name it introduced before "
     "any line defines it (a converter bug): nothing is written."),
)

_RULES = _RULES + TARGET_RULES

RULES: dict[str, Rule] = {rule_id: Rule(rule_id, summary, rule_id in BLOCKING)
                          for rule_id, summary in _RULES}


def check(rule_id: str) -> str:
    """`rule_id`, if registered; KeyError naming it otherwise."""
    if rule_id not in RULES:
        raise KeyError(f"rule id {rule_id!r} is not registered in distrun/convert/rules.py")
    return rule_id
