#include "session/session.h"

#include "core/error.h"
#include "data/text_corpus.h"
#include "data/token_files.h"
#include "data/tokenizer.h"
#include "device/device.h"
#include "device/resources.h"
#include "memory/tracking_allocator.h"
#include "models/model_choices.h"
#include "runtime/runtime_env.h"

namespace bigbatch {

JobPlace read_job_place() {
  JobPlace job;
  job.env = read_dist_environment(process_environment);
  if (job.env) {
    job.world_size = job.env->world_size;
    job.rank = job.env->rank;
  }
  return job;
}

Session open_session(const TrainConfig& config, const SessionRequest& request) {
  config.validate();
  Session session;
  session.config = config;
  if (request.job == JobScope::FromEnvironment)
    session.job = read_job_place();
  if (request.check_before_data)
    request.check_before_data(session.config, session.job);
  // Before the data loads: a device that cannot work is said at once.
  if (request.device == SessionDevice::Resolve) {
    session.device =
        resolve_device(config.device, session.job.local_rank(), session.job.world_size);
  }
  if (request.memory == MemoryAccounting::Budgeted)
    start_memory_accounting(config, session.device);
  if (request.cpu == SessionCpu::Configure) {
    session.threads = resolve_thread_count(config.threads);
    session.flushing_denormals = configure_cpu(config, session.threads);
  }
  if (request.data == SessionData::Load)
    session.data = load_data_outside_budget(config);
  return session;
}

DatasetSplits set_aside_controller_slice(DatasetSplits data, const TrainConfig& config) {
  const int64_t size = data.train.size();
  const int64_t holdout = config.growth_holdout_samples(size);
  if (holdout == 0)
    return data;
  check_config(holdout < size,
               "--growth-holdout " + std::to_string(holdout) + " would set aside all " +
                   std::to_string(size) + " training samples",
               "give a smaller --growth-holdout, or train on more data");
  data.controller = data.train.slice(size - holdout, size);
  data.train = data.train.slice(0, size - holdout);
  return data;
}

namespace {
DatasetSplits load_data_as_given(const TrainConfig& config);
}  // namespace

DatasetSplits load_data_outside_budget(const TrainConfig& config) {
  return set_aside_controller_slice(load_data_as_given(config), config);
}

namespace {

DatasetSplits load_data_as_given(const TrainConfig& config) {
  if (is_custom(config.dataset)) {
    throw Error(ErrorKind::Usage,
                "dataset '" + config.dataset + "' comes from " + custom_origin(config.dataset) +
                    "; the command line cannot load it",
                "train, resume or evaluate it from that program");
  }
  UntrackedAllocations host_data;
  if (config.is_text_dataset()) {
    const TextCorpus corpus = config.is_jsonl_dataset()
                                  ? read_jsonl_corpus(config.text_path(), config.text_field)
                                  : read_text_corpus(config.text_path(), config.doc_separator);
    const auto tokenizer = make_tokenizer(config.tokenizer);
    return load_text_dataset(corpus, config.text_path(),
                             config.sequence_mode() == SequenceMode::Packed, config.seq_len,
                             config.train_subset, config.val_size, config.seed, *tokenizer);
  }
  if (config.is_token_file_dataset()) {
    TokenFiles files = read_token_files(config.text_path(), config.token_dtype);
    if (config.eot_id >= 0)
      cut_streams_at(files, config.eot_id, config.text_path());
    const bool packed = config.sequence_mode() == SequenceMode::Packed;
    return load_token_file_dataset(files, config.text_path(), packed, config.seq_len,
                                   config.vocab_size, config.train_subset, config.val_size,
                                   config.seed);
  }
  if (config.is_npy_dataset()) {
    const NpyTargets targets = config.task == TaskKind::Regress    ? NpyTargets::Values
                               : config.task == TaskKind::Classify ? NpyTargets::Classes
                                                                   : NpyTargets::Auto;
    return load_npy_dataset(config.dataset_directory(), config.train_subset, config.val_size,
                            targets);
  }
  return load_idx_dataset(config.dataset_directory(), config.train_subset, config.val_size,
                          {config.pixel_mean, config.pixel_std});
}

}  // namespace

}  // namespace bigbatch
