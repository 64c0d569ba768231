// kiln-lenet's training run, driven in-process through run_training
// (apps/lenet/trainer.h) on a tiny synthetic CIFAR-10 folder.
#include <gtest/gtest.h>

#include <sched.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet {
namespace {

using testing::gpu_present;
using testing::TempDir;

// The trainer's runs load their batches on two worker threads.
constexpr int kWorkers = 2;

TEST(LenetTrainer, TwoEpochsLogPlotCheckpointAndLearn) {
  TempDir dir("kiln-lenet-two-epochs");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.log = dir / "run.jsonl";
  o.plot = dir / "run.svg";
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  TrainingResult r = run_training(o, {.out = &out});

  EXPECT_EQ(r.status, RunStatus::Finished);
  EXPECT_EQ(r.global_step, 20);
  ASSERT_EQ(r.history.size(), 2u);
  // From chance (ln 10 = 2.30) down: the classes differ in brightness.
  EXPECT_LT(r.history[1].train_loss, r.history[0].train_loss);
  EXPECT_LT(r.history[1].test_loss, 2.0);

  std::vector<std::string> lines = testing::read_lines(o.log);
  ASSERT_EQ(lines.size(), 2u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EpochRecord rec = epoch_record_from_json(lines[i]);  // throws on a missing field
    EXPECT_EQ(rec.epoch, static_cast<int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(rec.train_loss, r.history[i].train_loss);
    EXPECT_DOUBLE_EQ(rec.test_accuracy, r.history[i].test_accuracy);
    EXPECT_GT(rec.images_per_second, 0);
    EXPECT_GT(rec.seconds, 0);
    // The run's wall clock: at least the training time of the epochs so far.
    EXPECT_GE(rec.elapsed_seconds, r.history[0].seconds + (i > 0 ? r.history[1].seconds : 0.0));
    if (i > 0) {
      EXPECT_GT(rec.elapsed_seconds, epoch_record_from_json(lines[0]).elapsed_seconds);
    }
  }
  EXPECT_NE(lines[0].find("\"images_per_second\""), std::string::npos);

  std::string svg = testing::read_text(o.plot);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("test accuracy"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.plot + ".tmp"));
  EXPECT_TRUE(std::filesystem::exists(o.save));

  // Progress lines (not a terminal: plain lines), epoch summaries, the table.
  const std::string text = out.str();
  EXPECT_NE(text.find("epoch 1/2  step 10/10"), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 2/2  train loss"), std::string::npos) << text;
  EXPECT_NE(text.find("airplane"), std::string::npos) << text;
  EXPECT_NE(text.find("truck"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);

  // A second run from scratch logs alone: the old lines are gone.
  o.epochs = 1;
  o.save.clear();
  run_training(o, {.out = &out});
  EXPECT_EQ(testing::read_lines(o.log).size(), 1u);
}

void expect_same_parameters(nn::Module& a, nn::Module& b) {
  TensorDict da = a.state_dict(), db = b.state_dict();
  ASSERT_EQ(da.keys(), db.keys());
  for (const auto& [name, t] : da) {
    Tensor u = t.contiguous(), v = db.at(name).contiguous();
    ASSERT_EQ(u.numel(), v.numel()) << name;
    EXPECT_EQ(std::memcmp(u.data_ptr(), v.data_ptr(), u.nbytes()), 0) << name << " differs";
  }
}

// Note [Exact resume]: stopping after `stop_at` steps and resuming gives the
// parameters and losses of the run that never stopped.
void check_resume(int64_t stop_at, bool augment, OptimizerKind optimizer) {
  TempDir dir("kiln-lenet-resume-" + std::to_string(stop_at));
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.augment = augment;
  o.optimizer = optimizer;
  if (optimizer != OptimizerKind::SGD) o.lr = 1e-3;
  std::ostringstream sink;
  TrainingResult whole = run_training(o, {.out = &sink});

  o.save = dir / "run.ckpt";
  o.log = dir / "run.jsonl";
  TrainingResult first =
      run_training(o, {.out = &sink, .should_stop = [&](int64_t step) { return step == stop_at; }});
  ASSERT_EQ(first.status, RunStatus::Interrupted);
  EXPECT_EQ(first.global_step, stop_at);
  EXPECT_EQ(first.epoch, (stop_at - 1) / 10);

  o.resume = o.save;
  TrainingResult second = run_training(o, {.out = &sink});
  ASSERT_EQ(second.status, RunStatus::Finished);
  EXPECT_EQ(second.global_step, 20);
  expect_same_parameters(*whole.model, *second.model);
  ASSERT_EQ(second.history.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(second.history[e].train_loss, whole.history[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(second.history[e].test_loss, whole.history[e].test_loss) << "epoch " << e + 1;
  }
  // The log gets each epoch once, whichever run finished it.
  EXPECT_EQ(testing::read_lines(o.log).size(), 2u);
}

TEST(LenetTrainer, ResumeMidEpochEqualsUninterrupted) { check_resume(13, true, OptimizerKind::SGD); }
TEST(LenetTrainer, ResumeInFirstEpochWithoutAugmentation) { check_resume(4, false, OptimizerKind::SGD); }
TEST(LenetTrainer, ResumeAtEpochEndWithAdamW) { check_resume(10, true, OptimizerKind::AdamW); }

TEST(LenetTrainer, EvalOnlyFromCheckpointAndWeights) {
  TempDir dir("kiln-lenet-eval");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.save = dir / "run.ckpt";
  std::ostringstream sink;
  TrainingResult trained = run_training(o, {.out = &sink});
  save_safetensors(dir / "weights.safetensors", trained.model->state_dict());

  TrainerOptions e;
  e.data = o.data;
  e.eval_only = true;
  e.resume = o.save;
  std::ostringstream out;
  TrainingResult evaluated = run_training(e, {.out = &out});
  EXPECT_EQ(evaluated.status, RunStatus::Evaluated);
  EXPECT_EQ(evaluated.evaluation.images, 100);
  EXPECT_DOUBLE_EQ(evaluated.evaluation.accuracy, trained.evaluation.accuracy);
  EXPECT_NEAR(evaluated.evaluation.loss, trained.evaluation.loss, 1e-6);
  EXPECT_NE(out.str().find("correct/images"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("all"), std::string::npos);

  e.resume.clear();
  e.weights = dir / "weights.safetensors";
  TrainingResult from_weights = run_training(e, {.out = &sink});
  EXPECT_DOUBLE_EQ(from_weights.evaluation.accuracy, trained.evaluation.accuracy);
  // Per class: 25 test images in each of the first four classes, none in the rest.
  EXPECT_EQ(from_weights.evaluation.total[0], 25);
  EXPECT_EQ(from_weights.evaluation.total[9], 0);
}

TEST(LenetTrainer, ResumeWithAnotherRecipeIsRefused) {
  TempDir dir("kiln-lenet-recipe");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.epochs = 1;
  o.save = dir / "run.ckpt";
  std::ostringstream sink;
  run_training(o, {.out = &sink});
  o.resume = o.save;
  o.epochs = 3;
  try {
    run_training(o, {.out = &sink});
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    const std::string m = err.message();
    EXPECT_NE(m.find("the checkpoint was made with epochs 1,"), std::string::npos) << m;
    EXPECT_NE(m.find("this run has epochs 3,"), std::string::npos) << m;
  }
}

// The files in `dir` whose names hold ".tmp" or ".probe" (what a save or an
// output check leaves when it fails to clean up).
std::vector<std::string> temporary_files(const TempDir& dir) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp") != std::string::npos || name.find(".probe") != std::string::npos) found.push_back(name);
  }
  return found;
}

// The message of the kiln::Error `run` throws ("" if none).
std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

// A one-epoch checkpoint, and a run that would resume it.
struct SavedRun {
  TempDir dir;
  TrainerOptions options;
  explicit SavedRun(const std::string& name) : dir(name) {
    testing::write_synthetic_cifar(dir.path());
    options = small_run(dir);
    options.epochs = 1;
    options.save = dir / "run.ckpt";
    std::ostringstream sink;
    run_training(options, {.out = &sink});
    options.resume = options.save;
    options.save.clear();
  }
  std::string resume_error() const {
    std::ostringstream sink;
    return error_of([&] { run_training(options, {.out = &sink}); });
  }
};

// A flipped bit in a checkpoint is found on load, naming the tensor, instead
// of training on from corrupt weights.
TEST(LenetTrainer, FlippedBitInACheckpointNamesTheTensor) {
  SavedRun run("kiln-lenet-flip");
  std::string bytes = testing::read_text(run.options.resume);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  const uint64_t begin = header["model.fc2.weight"]["data_offsets"][0].get<uint64_t>();
  bytes[8 + header_size + begin + 101] ^= 0x04;
  std::ofstream(run.options.resume, std::ios::binary | std::ios::trunc) << bytes;

  const std::string m = run.resume_error();
  EXPECT_NE(m.find("'" + run.options.resume + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'model.fc2.weight' is corrupt"), std::string::npos) << m;
  EXPECT_TRUE(temporary_files(run.dir).empty());
}

// Checkpoint metadata that is not what kiln-lenet wrote is an error naming
// the field and the value, not "stoll".
TEST(LenetTrainer, MalformedCheckpointMetadataNamesTheField) {
  SavedRun run("kiln-lenet-metadata");
  std::map<std::string, std::string> original;
  const TensorDict tensors = load_safetensors(run.options.resume, &original);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"extra.epoch", "two"},           {"extra.step_in_epoch", "-3"},  {"extra.epoch_loss_sum", "nan"},
      {"extra.world_size", "0"},        {"extra.epoch", "9"},           {"extra.batch_size", "1e3"}};
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key + " = " + value);
    std::map<std::string, std::string> metadata = original;
    metadata[key] = value;
    save_safetensors(run.options.resume, tensors, metadata);
    const std::string m = run.resume_error();
    EXPECT_NE(m.find("checkpoint field '" + key.substr(6) + "' is '" + value + "'; expected"), std::string::npos)
        << m;
  }
  std::map<std::string, std::string> metadata = original;
  metadata["extra.history"] = "[{\"epoch\": 1}]";
  save_safetensors(run.options.resume, tensors, metadata);
  const std::string m = run.resume_error();
  EXPECT_NE(m.find("checkpoint field 'history' is malformed: epoch record: field 'train_loss' is missing"),
            std::string::npos)
      << m;
  metadata.erase("extra.world_size");
  save_safetensors(run.options.resume, tensors, metadata);
  EXPECT_NE(run.resume_error().find("no 'world_size' field"), std::string::npos) << run.resume_error();
}

// The global batch is part of the recipe: another --batch-size on the same
// number of processes is refused, naming the one that fits.
TEST(LenetTrainer, ResumeWithAnotherGlobalBatchIsRefused) {
  SavedRun run("kiln-lenet-global-batch");
  run.options.batch_size = 10;
  const std::string m = run.resume_error();
  EXPECT_NE(m.find("the checkpoint was made by 1 process with --batch-size 20 (global batch 20); this run has 1 "
                   "process with --batch-size 10 (global batch 10). To continue it on 1 process, use --batch-size 20"),
            std::string::npos)
      << m;
}

// --plot, --save and --log are tried before any data is read or step taken.
TEST(LenetTrainer, UnwritableOutputsAreRefusedBeforeTraining) {
  TempDir dir("kiln-lenet-outputs");
  testing::write_synthetic_cifar(dir.path());
  for (const char* flag : {"--plot", "--save", "--log"}) {
    SCOPED_TRACE(flag);
    TrainerOptions o = small_run(dir);
    o.save = dir / "run.ckpt";
    const std::string bad = dir / "missing/out";
    if (std::string(flag) == "--plot") o.plot = bad;
    if (std::string(flag) == "--save") o.save = bad;
    if (std::string(flag) == "--log") o.log = bad;
    std::ostringstream out;
    const std::string m = error_of([&] { run_training(o, {.out = &out}); });
    EXPECT_EQ(m, std::string(flag) + " '" + bad + "': cannot create files beside it (No such file or directory)");
    EXPECT_EQ(out.str(), "");  // not even the data was opened
    EXPECT_FALSE(std::filesystem::exists(dir / "run.ckpt"));
  }
  TrainerOptions o = small_run(dir);
  o.plot = dir.path().string();
  EXPECT_EQ(error_of([&] { run_training(o); }), "--plot '" + o.plot + "' is a directory");
  EXPECT_TRUE(temporary_files(dir).empty());
}

// A chart that cannot be written mid-run is warned about; the epoch's
// checkpoint is still written, and the run goes on.
TEST(LenetTrainer, PlotFailingMidRunKeepsTheCheckpoint) {
  TempDir dir("kiln-lenet-plot-fails");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir);
  o.save = dir / "run.ckpt";
  o.plot = dir / "run.svg";
  o.log = dir / "run.jsonl";
  // After epoch 1's last step, the plot's temporary file becomes a folder:
  // the chart cannot be written from then on.
  bool blocked = false;
  auto block_plot_then_stop = [&](int64_t step) {
    if (step == 10 && !blocked) {
      std::filesystem::create_directory(o.plot + ".tmp");
      blocked = true;
      return false;
    }
    return blocked;
  };
  std::ostringstream out, err;
  TrainingResult r = run_training(o, {.out = &out, .err = &err, .should_stop = block_plot_then_stop});
  EXPECT_EQ(r.status, RunStatus::Interrupted);  // after epoch 1, at the check that follows the outputs
  EXPECT_EQ(r.epoch, 1);
  EXPECT_NE(err.str().find("kiln-lenet: warning: --plot '" + o.plot + "': cannot create '" + o.plot + ".tmp'"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(testing::read_lines(o.log).size(), 1u);
  std::filesystem::remove(o.plot + ".tmp");

  o.resume = o.save;
  TrainingResult resumed = run_training(o, {.out = &out, .err = &err});
  EXPECT_EQ(resumed.status, RunStatus::Finished);
  ASSERT_EQ(resumed.history.size(), 2u);
  EXPECT_EQ(resumed.history[0].train_loss, r.history[0].train_loss);
  EXPECT_NE(testing::read_text(o.plot).find("</svg>"), std::string::npos);
}

// More kernel threads than cores is warned about, naming the counts and
// the --threads that fits; as many as the cores is not.
TEST(LenetTrainer, MoreThreadsThanCoresWarns) {
  TempDir dir("kiln-lenet-threads");
  testing::write_synthetic_cifar(dir.path());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);
  const int saved_threads = get_num_threads();
  TrainerOptions o = small_run(dir);
  o.epochs = 1;
  o.threads = cores + 1;
  std::ostringstream out, err;
  run_training(o, {.out = &out, .err = &err});
  EXPECT_NE(err.str().find("kiln-lenet: warning: 1 process x " + std::to_string(cores + 1) + " threads = " +
                           std::to_string(cores + 1) + " kernel threads on " + std::to_string(cores) + " cores"),
            std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("Use --threads " + std::to_string(cores)), std::string::npos) << err.str();

  std::ostringstream quiet;
  o.threads = cores;
  run_training(o, {.out = &out, .err = &quiet});
  EXPECT_EQ(quiet.str(), "");
  set_num_threads(saved_threads);
}

TEST(LenetTrainer, MissingDataNamesThePathAndWhatWasLookedFor) {
  TempDir dir("kiln-lenet-nodata");
  TrainerOptions o;
  o.data = dir / "nowhere";
  try {
    run_training(o);
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    EXPECT_NE(err.message().find("--data '" + o.data + "' does not exist"), std::string::npos) << err.message();
    EXPECT_NE(err.message().find("cifar-10-batches-bin/"), std::string::npos) << err.message();
  }
  o.data = dir.path().string();  // exists, but empty
  try {
    run_training(o);
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    EXPECT_NE(err.message().find("holds neither cifar-10-batches-bin/"), std::string::npos) << err.message();
  }
}

// Without a GPU (or in a build without CUDA) --device cuda is refused with a
// message saying so, before any data is read; main() prints it.
TEST(LenetTrainer, CudaDeviceWithoutAGpuFailsSayingSo) {
  if (gpu_present()) GTEST_SKIP() << "this machine has a GPU; the no-GPU message cannot be seen";
  TempDir dir("kiln-lenet-cuda");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.device = "cuda";
  o.epochs = 1;
  std::ostringstream sink;
  try {
    run_training(o, {.out = &sink});
    ADD_FAILURE() << "--device cuda trained without a GPU";
  } catch (const Error& err) {
#ifdef KILN_WITH_CUDA
    EXPECT_NE(err.message().find("no CUDA device is available"), std::string::npos) << err.message();
#else
    EXPECT_NE(err.message().find("KILN_CUDA=OFF"), std::string::npos) << err.message();
#endif
  }
}

// On a GPU the same run learns as on the CPU: every epoch's losses and
// accuracy agree to float32 rounding (the kernels differ in summation order,
// not in arithmetic), starting from the same seed.
TEST(LenetTrainer, CudaDeviceTrainsAsTheCpuDoes) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device on this machine";
  TempDir dir("kiln-lenet-cuda");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  std::ostringstream sink;
  const TrainingResult cpu = run_training(o, {.out = &sink});
  o.device = "cuda";
  const TrainingResult gpu = run_training(o, {.out = &sink});
  ASSERT_EQ(gpu.history.size(), cpu.history.size());
  for (size_t i = 0; i < cpu.history.size(); ++i) {
    EXPECT_NEAR(gpu.history[i].train_loss, cpu.history[i].train_loss, 1e-3 * cpu.history[i].train_loss) << i;
    EXPECT_NEAR(gpu.history[i].test_loss, cpu.history[i].test_loss, 1e-3 * cpu.history[i].test_loss) << i;
    // One image of the 100 flipped is 0.01 (plus rounding).
    EXPECT_NEAR(gpu.history[i].test_accuracy, cpu.history[i].test_accuracy, 0.015) << i;
  }
}

}  // namespace
}  // namespace kiln::apps::lenet
