#include "train/trainer.h"

#include <torch/torch.h>

#include <chrono>

#include "core/clock.h"
#include "core/files.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "models/scripted_model.h"
#include "report/html_report.h"
#include "report/run_records.h"
#include "train/fit_loop.h"
#include "train/run_setup.h"
#include "train/training_run.h"

namespace bigbatch {

namespace {

// The run's weights.safetensors, and --save-weights (rank 0).
void save_final_weights(TrainingRun& run, int64_t step) {
  if (!run.job.is_main())
    return;
  run.save_model_weights(run.run_dir + "/weights.safetensors", step);
  if (!run.config.save_weights.empty())
    run.save_model_weights(run.config.save_weights, step);
  // A user's module also comes back as itself, trained: torch.jit.load(RUN/model.pt).
  if (auto* scripted = as_scripted(*run.model))
    scripted->save_module(run.run_dir + "/model.pt");
}

// What the run's last recorded evaluation reached: ", test accuracy 30.95%, test loss 1.986".
std::string recorded_figures(const TrainingRun& run) {
  std::string reached;
  const std::string metrics = run.run_dir + "/metrics.jsonl";
  if (path_exists(metrics)) {
    const RunRecords records = read_run_records(metrics);
    if (!records.epochs.empty()) {
      const nlohmann::json& last = records.epochs.back();
      for (const char* key : {"test_accuracy", "val_accuracy"}) {
        if (last.contains(key) && last[key].is_number()) {
          reached = std::string(", ") + (key[0] == 't' ? "test" : "validation") + " accuracy " +
                    format_significant(100 * last[key].get<double>(), 4) + "%";
          break;
        }
      }
      for (const char* key : {"test_loss", "val_loss"}) {
        if (last.contains(key) && last[key].is_number()) {
          reached += std::string(", ") + (key[0] == 't' ? "test" : "validation") + " loss " +
                     format_loss(last[key].get<double>());
          break;
        }
      }
    }
  }
  return reached;
}

// What a finished run reached, from its own records: resuming it again changes nothing.
std::string finished_run_summary(const TrainingRun& run) {
  return "run '" + run.run_dir +
         "' has already finished: " + count_of(run.state.at.step, "update") + ", " +
         count_of(run.state.at.samples_seen, "sample") + recorded_figures(run) +
         ". Nothing was trained or changed; to train it longer, resume with a larger --epochs "
         "or --max-updates";
}

}  // namespace

TrainResult run_training(const TrainConfig& requested, const CustomProblem* problem) {
  const auto run_start = SteadyClock::now();
  Session session = open_session(
      requested, training_session_request(problem != nullptr && is_custom(requested.dataset)));
  const JobPlace job = session.job;
  Console console(job.is_main(), requested.progress);
  TrainingRun run = set_up_training(std::move(session), console, problem);

  TrainResult result;
  result.run_dir = run.run_dir;
  result.is_main_rank = job.is_main();
  if (run.finished) {
    console.say(finished_run_summary(run));
    result.already_finished = true;
    result.total_seconds = seconds_since(run_start);
    return result;
  }
  if (run.resolved.total_updates == 0) {
    save_final_weights(run, 0);
    console.say("--max-updates 0: wrote the initial weights to " + run.run_dir +
                "/weights.safetensors");
    result.total_seconds = seconds_since(run_start);
    return result;
  }

  result.earlier_train_seconds = run.state.at.train_seconds;
  const int64_t first_step = run.state.at.step;
  FitLoop loop(run, console);
  try {
    loop.run();
  } catch (const Error& e) {
    // A diverged run is the one whose charts are most needed: it gets its report too, which
    // says so. The report cannot replace the error: one that fails is only mentioned.
    if (e.kind() == ErrorKind::Diverged && run.metrics) {
      run.metrics.reset();
      try {
        console.say("report: " + write_run_report(run.run_dir));
      } catch (const std::exception& report_error) {
        console.say(std::string("report not written: ") + report_error.what());
      }
    } else if (e.kind() == ErrorKind::Model && run.state.at.step > 0) {
      // The module broke its contract: a resume would meet it again, so a run with no
      // checkpoint is not left as one that can neither be resumed nor reused.
      const std::string aside = run.set_failed_run_aside();
      if (!aside.empty()) {
        console.say("moved the run's records to " + aside + ": it stopped after " +
                    count_of(run.state.at.step, "update") +
                    " with no checkpoint to resume from, and its --out can be used again");
      }
    } else {
      run.discard_unstarted();  // failed in its first update: as if never started
    }
    throw;
  }

  const TrainingProgress& at = run.state.at;
  save_final_weights(run, at.step);
  if (run.metrics) {
    run.metrics.reset();  // flushed and closed: the report reads every line
    console.say("report: " + write_run_report(run.run_dir));
  }
  result.updates = at.step;
  result.samples_seen = at.samples_seen;
  result.items_seen = at.items_seen;
  result.language_model = run.data.train.is_tokens();
  result.val_loss = loop.last_validation().loss;
  result.val_bits_per_byte = loop.last_validation().bits_per_byte;
  result.val_has_bits_per_byte = loop.last_validation().has_bits_per_byte;
  result.test_loss = loop.last_test().loss;
  result.test_accuracy = loop.last_test().accuracy;
  result.tested = loop.last_test().items > 0;
  if (run.state.at.step == first_step && !result.tested) {
    result.nothing_left_to_train = true;
    const std::string figures = recorded_figures(run);
    result.recorded_figures = figures.empty() ? figures : figures.substr(2);  // its ", " left out
  }
  result.has_accuracy = run.task().scores_predictions();
  result.is_regression = run.task().is_regression();
  result.test_rmse = loop.last_test().rmse;
  result.train_seconds = at.train_seconds;
  result.samples_per_s = at.train_seconds > 0 ? double(at.samples_seen) / at.train_seconds : 0;
  result.total_seconds = seconds_since(run_start);
  return result;
}

}  // namespace bigbatch
