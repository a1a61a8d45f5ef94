// bigbatch._engine: the C++ engine under `import bigbatch` (python/bigbatch/). The package's
// Python side turns keywords into the option table's text and gathers the user's samples; this
// module holds everything else in the engine's own code: the configuration's validation, the
// plan, and a loop's updates (train/user_loop.h). The GIL is released while the engine works
// (backward through the user's graph, the reduction, the optimizer); errors arrive in Python as
// bigbatch.Error with the command line's kind, problem and hint.
#include <torch/extension.h>

#include <string>
#include <utility>
#include <vector>

#include "commands/lr_find_command.h"
#include "commands/plan_command.h"
#include "commands/verify.h"
#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "python_model.h"
#include "report/plan_report.h"
#include "session/session.h"
#include "train/custom_problem.h"
#include "train/run_directory.h"
#include "train/trainer.h"
#include "train/user_loop.h"

namespace py = pybind11;

namespace bigbatch {
namespace {

using OptionTexts = std::vector<std::pair<std::string, std::string>>;

// The Python class that bigbatch.Error is (set once by the package on import).
py::object& error_class() {
  static py::object* held = new py::object();  // never destroyed: outlives the interpreter
  return *held;
}

// The options by keyword, for the package's checks of names and values.
py::list option_rows() {
  py::list rows;
  for (const OptionSpec& spec : option_table()) {
    py::dict row;
    row["name"] = spec.name;
    row["switch"] = spec.is_switch();
    row["list"] = spec.is_list;
    row["train"] = (spec.commands & kTrainCommand) != 0;
    row["plan"] = (spec.commands & kPlanCommand) != 0;
    row["help"] = spec.help;
    rows.append(row);
  }
  return rows;
}

// A configuration from option texts (names as the command line spells them), validated by the
// session it opens.
TrainConfig configured(const OptionTexts& options) {
  TrainConfig config;
  for (const auto& [name, text] : options)
    apply_option(config, find_option(name), text);
  return config;
}

// The plan's JSON, as `bigbatch plan --json` prints it: over `dataset_size` samples when given,
// else over the dataset the options name (loaded, as the command line loads it).
std::string plan_text_json(const OptionTexts& options, int64_t dataset_size, int64_t world_size) {
  check_config(world_size >= 1, "world_size must be 1 or more", "e.g. world_size=4");
  SessionRequest request;
  request.device = SessionDevice::None;
  request.cpu = SessionCpu::Untouched;
  request.data = dataset_size > 0 ? SessionData::None : SessionData::Load;
  const Session session = open_session(configured(options), request);
  const bool sized = dataset_size > 0;
  const ResolvedRun run = plan_session(session, sized, dataset_size, 0, world_size);
  return plan_session_json(session, sized, run).dump();
}

// A split of the user's samples: (inputs, targets) tensors, or None.
GivenSplit given(const py::object& split) {
  if (split.is_none())
    return {};
  const py::tuple pair = split;
  return {pair[0].cast<torch::Tensor>(), pair[1].cast<torch::Tensor>()};
}

// The user's program as the engine takes a program's own, named in `config`: `program` is the
// package's (python/bigbatch/_train.py, _Program): its module (None: the model the options
// name), loss, computes_loss, name, inputs_of, and its splits (None: the dataset the options
// name).
CustomProblem python_problem(TrainConfig& config, const py::object& program) {
  CustomProblem problem;
  const py::object module = program.attr("module");
  if (!module.is_none()) {
    // The device a module of Python's runs on is not yet tested: no accelerator here.
    check_config(config.device.kind == DeviceKind::Cpu,
                 "your module trains on the CPU in this version; device=" +
                     config.device.to_string() + " is not yet supported from Python",
                 "leave device unset (cpu), or train a built-in model by name");
    const std::string name = program.attr("name").cast<std::string>();
    config.model = name;
    PythonModule python;
    python.module = module;
    python.loss = program.attr("loss");
    python.computes_loss = program.attr("computes_loss").cast<bool>();
    python.name = name;
    python.inputs_of = program.attr("inputs_of");
    const auto shared = share_python_module(std::move(python));
    problem.make_model = [shared] { return python_model(*shared); };
    problem.make_probe_model = [shared] { return python_model_copy(*shared); };
  }
  const py::object train = program.attr("train");
  if (!train.is_none()) {
    config.dataset = program.attr("data_name").cast<std::string>();
    problem.data =
        given_splits(given(train), given(program.attr("validation")), given(program.attr("test")));
  }
  return problem;
}

// Whether the program brings a model or data of its own.
bool brings_its_own(const py::object& program) {
  return !program.attr("module").is_none() || !program.attr("train").is_none();
}

// bigbatch.verify: the first update's window as the plan's micro-batches and as one batch, from
// copies of the user's module; the differences per parameter and the verdict.
py::dict verify_run(const OptionTexts& options, const py::object& program) {
  TrainConfig config = configured(options);
  const CustomProblem problem = python_problem(config, program);
  VerifyReport report;
  {
    py::gil_scoped_release released;
    report = run_verify(config, /*break_normalisation_for_tests=*/false, &problem);
  }
  static const char* const verdicts[] = {"exact", "batch_norm", "unexpected"};
  py::dict out;
  out["verdict"] = verdicts[static_cast<int>(report.verdict)];
  out["largest_relative"] = report.largest_relative;
  py::dict tensors;
  for (const VerifyDifference& d : report.differences) {
    py::dict row;
    row["gradient_max_abs"] = d.gradient_max_abs;
    row["gradient_relative"] = d.gradient_relative;
    row["weight_max_abs"] = d.weight_max_abs;
    row["weight_relative"] = d.weight_relative;
    row["accumulated_vs_float64"] =
        d.accumulated_vs_float64 ? py::object(py::float_(*d.accumulated_vs_float64)) : py::none();
    row["whole_vs_float64"] =
        d.whole_vs_float64 ? py::object(py::float_(*d.whole_vs_float64)) : py::none();
    tensors[py::str(d.name)] = row;
  }
  out["tensors"] = tensors;
  out["dropout_off"] = report.dropout_off;
  out["text"] = report.text;
  return out;
}

// bigbatch.lr_find: the range test at the plan's batch, on a copy of the user's module; what
// lr_find.json holds, the run directory and the command line's text.
py::dict lr_find_run(const OptionTexts& options, const py::object& program, double lr_min,
                     double lr_max, int64_t updates) {
  TrainConfig config = configured(options);
  CustomProblem problem = python_problem(config, program);
  // The test trains at rates up to divergence: on a copy, never the user's module.
  if (problem.make_probe_model)
    problem.make_model = problem.make_probe_model;
  const bool custom = brings_its_own(program);
  LrFindReport report;
  {
    py::gil_scoped_release released;
    LrFindOptions test{lr_min, lr_max, updates, {}};
    for (const auto& [name, text] : options)
      test.given.push_back(name);  // a keyword the test owns is refused at any value
    report = run_lr_find(config, test, custom ? &problem : nullptr);
  }
  py::dict out = py::module_::import("json").attr("loads")(report.json);
  out["run_dir"] = report.run_dir;
  out["text"] = report.text;
  return out;
}

// bigbatch.train: the command line's training run, over the user's module (None: the model the
// options name) and samples (None: the dataset the options name). The GIL is released while
// the engine trains; it is taken again only to call the module.
py::dict train_run(const OptionTexts& options, const py::object& program) {
  // resume=RUN_DIR: the run's config.toml under the other keywords, as --resume reads it.
  std::string resume;
  bool out_given = false;
  OptionTexts others;
  for (const auto& [name, text] : options) {
    if (name == "resume")
      resume = text;
    else
      others.emplace_back(name, text);
    out_given = out_given || name == "out";
  }
  TrainConfig config = resume.empty() ? configured(options)
                                      : resume_configuration(
                                            resume,
                                            [&](TrainConfig& resumed) {
                                              for (const auto& [name, text] : others)
                                                apply_option(resumed, find_option(name), text);
                                            },
                                            /*init_weights_given=*/false, out_given);
  CustomProblem problem = python_problem(config, program);
  const bool custom = brings_its_own(program);
  TrainResult result;
  {
    py::gil_scoped_release released;
    result = run_training(config, custom ? &problem : nullptr);
  }
  py::dict out;
  out["run_dir"] = result.run_dir;
  out["main_rank"] = result.is_main_rank;
  out["updates"] = result.updates;
  out["samples_seen"] = result.samples_seen;
  out["items_seen"] = result.items_seen;
  out["already_finished"] = result.already_finished;
  out["train_seconds"] = result.train_seconds;
  out["total_seconds"] = result.total_seconds;
  out["samples_per_s"] = result.samples_per_s;
  if (result.tested) {
    out["test_loss"] = result.test_loss;
    if (result.has_accuracy)
      out["test_accuracy"] = result.test_accuracy;
    if (result.is_regression)
      out["test_rmse"] = result.test_rmse;
  }
  return out;
}

// A user's loop over the engine, with the plan and the stats as Python values.
class PyLoop {
 public:
  PyLoop(const OptionTexts& options, int64_t dataset_size, const NamedTensors& parameters) {
    SessionRequest request;
    // A rank of the job the environment describes (bigbatch launch -- python ...), or alone.
    request.job = JobScope::FromEnvironment;
    // The process is the user's: its threads and floating-point mode stay as they set them.
    request.cpu = SessionCpu::Untouched;
    request.data = SessionData::None;  // the user's own samples
    const Session session = open_session(configured(options), request);
    check_config(session.device.is_cpu(),
                 "a loop of your own runs on the CPU in this version; device=" +
                     session.device.str() + " is not yet supported from Python",
                 "leave device unset (cpu)");
    loop_ = std::make_unique<UserLoop>(session.config, dataset_size, parameters, session.job);
  }

  std::vector<std::vector<int64_t>> next_window() { return loop_->next_window(); }
  void backward(const torch::Tensor& loss_sum, int64_t samples, int64_t items, bool last) {
    loop_->backward(loss_sum, samples, items, last);
  }
  py::dict step() {
    UserLoopStep s;
    {
      py::gil_scoped_release released;
      s = loop_->step();
    }
    py::dict out;
    out["step"] = s.step;
    out["epoch"] = s.epoch;
    out["samples"] = s.samples;
    out["items"] = s.items;
    out["loss"] = s.loss;
    out["grad_norm"] = s.grad_norm;
    out["lr"] = s.lr;
    out["skipped"] = s.skipped;
    out["noise_scale"] = s.noise_scale;
    return out;
  }
  py::dict state() const {
    const UserLoopState state = loop_->state();
    py::dict out;
    out["progress"] = state.progress.dump();
    out["optimizer"] = py::bytes(state.optimizer);
    return out;
  }
  void load_state(const std::string& progress, const py::bytes& optimizer) {
    const auto parsed = nlohmann::json::parse(progress, nullptr, /*allow_exceptions=*/false);
    check_config(!parsed.is_discarded(), "the state's progress is not JSON",
                 "give what state_dict() returned");
    loop_->load_state({parsed, std::string(optimizer)});
  }
  bool complete() const { return loop_->complete(); }
  std::string plan_json_text() const { return plan_json(loop_->resolved()).dump(); }
  std::string plan_text() const { return format_plan_text(loop_->resolved()); }
  int64_t rank() const { return loop_->job().rank; }
  int64_t world_size() const { return loop_->job().world_size; }

 private:
  std::unique_ptr<UserLoop> loop_;
};

}  // namespace
}  // namespace bigbatch

PYBIND11_MODULE(_engine, m) {
  using namespace bigbatch;
  m.doc() = "bigbatch's C++ engine (use the bigbatch package, not this module)";
  m.def("set_error_class", [](py::object cls) { error_class() = std::move(cls); });
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised)
        std::rethrow_exception(raised);
    } catch (const Error& e) {
      if (!error_class())
        throw;
      PyErr_SetObject(error_class().ptr(),
                      py::make_tuple(to_string(e.kind()), e.problem(), e.hint()).ptr());
    } catch (const Interrupted& e) {
      // Ctrl-C in bigbatch.train: the run stopped at an update's end and wrote its checkpoint
      // (resume=RUN_DIR goes on from there); Python hears it as the interrupt it is.
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });
  m.def("option_rows", &option_rows);
  m.def("plan_json", &plan_text_json, py::arg("options"), py::arg("dataset_size"),
        py::arg("world_size"));
  m.def("verify", &verify_run, py::arg("options"), py::arg("program"));
  m.def("lr_find", &lr_find_run, py::arg("options"), py::arg("program"), py::arg("lr_min"),
        py::arg("lr_max"), py::arg("updates"));
  m.def("train", &train_run, py::arg("options"), py::arg("program"));
  py::class_<PyLoop>(m, "Loop")
      // Over ranks, the constructor waits for the others (rendezvous, agreement, rank 0's
      // weights): without the GIL.
      .def(py::init<const OptionTexts&, int64_t, const NamedTensors&>(),
           py::call_guard<py::gil_scoped_release>())
      .def("next_window", &PyLoop::next_window)
      // Backward runs the user's autograd graph without the GIL, as torch.autograd.backward does.
      .def("backward", &PyLoop::backward, py::call_guard<py::gil_scoped_release>())
      .def("step", &PyLoop::step)
      .def("state", &PyLoop::state)
      .def("load_state", &PyLoop::load_state)
      .def("complete", &PyLoop::complete)
      .def("plan_json", &PyLoop::plan_json_text)
      .def("plan_text", &PyLoop::plan_text)
      .def("rank", &PyLoop::rank)
      .def("world_size", &PyLoop::world_size);
}
