// kiln-dcgan: its two networks, its training run on a tiny synthetic
// CIFAR-10 folder (the one the kiln-lenet tests write), its PNG grid, log and
// checkpoints, and its command line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "apps/dcgan/models.h"
#include "apps/dcgan/options.h"
#include "apps/dcgan/trainer.h"
#include "data/image.h"
#include "kiln.h"
#include "lenet_test_data.h"

namespace kiln::apps::dcgan {
namespace {

using apps::testing::contains;
using apps::testing::read_lines;
using apps::testing::TempDir;

constexpr ModelSize kTiny{.nz = 8, .ngf = 8, .ndf = 8};

std::string parse_error(const std::vector<std::string>& args) {
  return apps::testing::command_line_error([](const std::vector<std::string>& argv) { parse_command_line(argv); },
                                           "kiln-dcgan", args);
}

// The message of the kiln::Error `f` throws, or "".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

// A few steps of tiny networks on the 200 synthetic images in `dir`, one
// thread so that sums go in one order and runs compare bitwise.
TrainOptions tiny_run(const TempDir& dir, int64_t steps = 6) {
  TrainOptions o;
  o.data = dir.path().string();
  o.size = kTiny;
  o.batch_size = 16;
  o.steps = steps;
  o.threads = 1;
  o.print_every = 1000;
  o.samples = dir / "samples.png";
  return o;
}

TrainerHooks quiet_hooks(std::ostream& sink) {
  TrainerHooks hooks;
  hooks.out = &sink;
  hooks.err = &sink;
  hooks.should_stop = [](int64_t) { return false; };
  return hooks;
}

TrainingResult train_quietly(const TrainOptions& o) {
  std::ostringstream sink;
  return run_training(o, quiet_hooks(sink));
}

// Both networks' parameters and buffers, by name.
TensorDict state_of(const TrainingResult& r) {
  TensorDict all;
  for (const auto& [name, t] : r.generator->state_dict()) all.insert("generator." + name, t);
  for (const auto& [name, t] : r.discriminator->state_dict()) all.insert("discriminator." + name, t);
  return all;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor u = a.contiguous(), v = b.contiguous();
  return std::memcmp(u.data_ptr(), v.data_ptr(), u.nbytes()) == 0;
}

void expect_same_state(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : a) EXPECT_TRUE(bitwise_equal(t, b.at(name))) << name;
}

int64_t differing_tensors(const TensorDict& a, const TensorDict& b) {
  int64_t n = 0;
  for (const auto& [name, t] : a) n += bitwise_equal(t, b.at(name)) ? 0 : 1;
  return n;
}

// ---- the networks ----

TEST(DcganModels, GeneratorMakesImagesInMinusOneToOne) {
  manual_seed(0);
  DCGANGenerator g(kTiny);
  Tensor fake = g(randn({5, kTiny.nz, 1, 1}));
  EXPECT_EQ(fake.shape(), (Shape{5, 3, 32, 32}));
  EXPECT_GE(min(fake).item<double>(), -1.0);
  EXPECT_LE(max(fake).item<double>(), 1.0);
  // Not a constant image: the latents reach the pixels.
  EXPECT_GT(kiln::std(fake).item<double>(), 0.0);
}

TEST(DcganModels, LayersAreNamedAndShapedAsLibTorchsExample) {
  DCGANGenerator g(ModelSize{});
  const TensorDict p = g->named_parameters();
  EXPECT_EQ(p.at("conv1.weight").shape(), (Shape{100, 256, 4, 4}));  // ConvTranspose2d: (in, out, kh, kw)
  EXPECT_EQ(p.at("conv2.weight").shape(), (Shape{256, 128, 4, 4}));
  EXPECT_EQ(p.at("conv3.weight").shape(), (Shape{128, 64, 4, 4}));
  EXPECT_EQ(p.at("conv4.weight").shape(), (Shape{64, 3, 4, 4}));
  EXPECT_EQ(p.at("batch_norm1.weight").shape(), (Shape{256}));
  // No bias before a batch norm, whose shift is one.
  EXPECT_FALSE(p.contains("conv1.bias"));
  EXPECT_FALSE(p.contains("conv3.bias"));
  EXPECT_EQ(p.at("conv4.bias").shape(), (Shape{3}));

  std::shared_ptr<nn::Sequential> d = make_discriminator(ModelSize{});
  const TensorDict q = d->named_parameters();
  EXPECT_EQ(q.at("0.weight").shape(), (Shape{64, 3, 4, 4}));
  EXPECT_FALSE(q.contains("2.bias"));
  EXPECT_EQ(q.at("3.weight").shape(), (Shape{128}));  // BatchNorm2d(2 ndf)
  EXPECT_EQ(q.at("8.weight").shape(), (Shape{1, 256, 4, 4}));
}

TEST(DcganModels, DiscriminatorGivesOneLogitPerImageAndGradientsReachTheImages) {
  manual_seed(0);
  std::shared_ptr<nn::Sequential> d = make_discriminator(kTiny);
  Tensor images = rand({4, 3, 32, 32}).requires_grad_();
  Tensor logits = (*d)(images);
  EXPECT_EQ(logits.shape(), (Shape{4, 1, 1, 1}));
  sum(logits).backward();
  ASSERT_TRUE(images.grad().defined());
  EXPECT_GT(sum(abs(images.grad())).item<double>(), 0.0);
}

TEST(DcganModels, InitIsThePapers) {
  DCGANGenerator g(ModelSize{});
  std::shared_ptr<nn::Sequential> d = make_discriminator(ModelSize{});
  kiln::Generator gen(3);
  dcgan_init_(*g, &gen);
  dcgan_init_(*d, &gen);
  // Weights of about a million draws and more: the sample moments are
  // within a few percent of N(0, 0.02) and N(1, 0.02).
  for (const Tensor& w : {g->conv2->weight, d->at<nn::Conv2d>(5)->weight}) {
    EXPECT_NEAR(mean(w).item<double>(), 0.0, 1e-3);
    EXPECT_NEAR(kiln::std(w).item<double>(), 0.02, 0.001);
  }
  EXPECT_NEAR(mean(g->batch_norm1->weight).item<double>(), 1.0, 0.005);
  EXPECT_NEAR(kiln::std(g->batch_norm1->weight).item<double>(), 0.02, 0.005);
  EXPECT_EQ(max(abs(g->batch_norm1->bias)).item<double>(), 0.0);
  EXPECT_EQ(max(abs(g->conv4->bias)).item<double>(), 0.0);
  EXPECT_EQ(max(abs(d->at<nn::Conv2d>(0)->bias)).item<double>(), 0.0);

  // The same generator state draws the same weights.
  DCGANGenerator again(ModelSize{});
  kiln::Generator same(3);
  dcgan_init_(*again, &same);
  expect_same_state(again->state_dict(), g->state_dict());
}

TEST(DcganModels, BadSizesAndLatentsNameTheProblem) {
  EXPECT_TRUE(contains(error_of([] { DCGANGenerator g(ModelSize{.nz = 0}); }), "nz, ngf and ndf must be positive"));
  EXPECT_TRUE(contains(error_of([] { make_discriminator(ModelSize{.ndf = -1}); }), "ndf -1"));
  DCGANGenerator g(kTiny);
  const std::string message = error_of([&] { g(randn({2, 3, 1, 1})); });
  EXPECT_TRUE(contains(message, "DCGANGenerator: expected a latent batch (N, 8, 1, 1)")) << message;
}

// ---- training ----

class DcganTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("kiln-dcgan-test");
    lenet::testing::write_synthetic_cifar(dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
};
TempDir* DcganTraining::dir_ = nullptr;

TEST_F(DcganTraining, SameSeedSameNetworksAnotherSeedOthers) {
  const TrainOptions o = tiny_run(*dir_);
  const TrainingResult a = train_quietly(o);
  const TrainingResult b = train_quietly(o);
  ASSERT_EQ(a.steps, 6);
  ASSERT_EQ(a.history.size(), 6u);
  expect_same_state(state_of(a), state_of(b));

  TrainOptions other = o;
  other.seed = 2;
  const TrainingResult c = train_quietly(other);
  const TensorDict pa = a.generator->named_parameters(), pc = c.generator->named_parameters();
  EXPECT_EQ(differing_tensors(pa, pc), static_cast<int64_t>(pa.size()));
  const TensorDict qa = a.discriminator->named_parameters(), qc = c.discriminator->named_parameters();
  EXPECT_EQ(differing_tensors(qa, qc), static_cast<int64_t>(qa.size()));

  // Training moved every parameter of both networks away from its start.
  TrainOptions untrained = o;
  untrained.steps = 1;
  const TrainingResult one = train_quietly(untrained);
  DCGANGenerator start(kTiny);
  kiln::Generator init(o.seed);
  dcgan_init_(*start, &init);
  for (const auto& [name, p] : start->named_parameters()) {
    EXPECT_FALSE(bitwise_equal(p, a.generator->named_parameters().at(name))) << name;
  }
  EXPECT_EQ(one.history.front().step, 1);
  EXPECT_EQ(one.history.front().epoch, 1);
}

TEST_F(DcganTraining, DiscriminatorLearnsToTellTheRealImagesFromTheFakes) {
  TrainOptions o = tiny_run(*dir_, 24);  // two epochs of 12 steps
  const TrainingResult r = train_quietly(o);
  ASSERT_EQ(r.history.size(), 24u);
  EXPECT_EQ(r.history.back().epoch, 2);
  for (const StepRecord& s : r.history) {
    EXPECT_TRUE(std::isfinite(s.loss_d) && std::isfinite(s.loss_g)) << s.step;
    EXPECT_GE(s.d_x, 0.0);
    EXPECT_LE(s.d_x, 1.0);
  }
  // At the start D cannot tell them apart (D(x) and D(G(z)) near 1/2, its
  // loss near 2 log 2); 24 steps later it scores the real images well
  // above the fakes (0.72 and 0.48 here), and its loss has fallen (to
  // 0.98). Its own update lowers its score of the same fakes.
  const StepRecord& first = r.history.front();
  const StepRecord& last = r.history.back();
  EXPECT_NEAR(first.loss_d, 2 * std::log(2.0), 0.1);
  EXPECT_NEAR(first.d_x, 0.5, 0.1);
  EXPECT_NEAR(first.d_g_z1, 0.5, 0.1);
  EXPECT_LT(last.loss_d, first.loss_d - 0.2);
  EXPECT_GT(last.d_x, last.d_g_z1 + 0.1);
  EXPECT_LT(last.d_g_z2, last.d_g_z1);
}

TEST_F(DcganTraining, WritesTheSampleGridAsPngAndALogLinePerStep) {
  TrainOptions o = tiny_run(*dir_, 4);
  o.log = *dir_ / "run.jsonl";
  o.sample_every = 2;
  const TrainingResult r = train_quietly(o);
  // 8 x 8 images of 32 pixels with 2 pixels between and around them.
  const Tensor png = data::decode_image_file(o.samples);
  EXPECT_EQ(png.shape(), (Shape{3, 8 * 34 + 2, 8 * 34 + 2}));
  // The grid is the generator's samples of the fixed latents.
  EXPECT_TRUE(bitwise_equal(png, sample_grid(*r.generator, grid_latents(o))));
  // Drawing it changed nothing in the generator.
  const TensorDict before = r.generator->state_dict();
  TensorDict copy;
  for (const auto& [name, t] : before) copy.insert(name, t.clone());
  sample_grid(*r.generator, grid_latents(o));
  expect_same_state(copy, r.generator->state_dict());

  const std::vector<std::string> lines = read_lines(o.log);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind(R"({"step":1,"epoch":1,"loss_d":)", 0), 0u) << lines[0];
  for (const char* key : {"\"loss_g\":", "\"d_x\":", "\"d_g_z1\":", "\"d_g_z2\":"}) {
    EXPECT_TRUE(contains(lines[3], key)) << lines[3];
  }
  EXPECT_EQ(lines[3], to_json_line(r.history[3]));
}

TEST_F(DcganTraining, ResumedRunEndsWithTheSameNetworks) {
  // 14 steps cross the first epoch's end (12 steps of 16 of 200 images).
  const TrainOptions straight = tiny_run(*dir_, 14);
  const TrainingResult whole = train_quietly(straight);

  TrainOptions first = straight;
  first.steps = 7;
  first.save = *dir_ / "run.ckpt";
  first.log = *dir_ / "resume.jsonl";
  train_quietly(first);
  TrainOptions second = first;
  second.steps = 14;
  second.resume = first.save;
  const TrainingResult rest = train_quietly(second);

  EXPECT_EQ(rest.steps, 14);
  ASSERT_EQ(rest.history.size(), 7u);
  EXPECT_EQ(rest.history.front().step, 8);
  EXPECT_EQ(rest.history.back().epoch, 2);
  expect_same_state(state_of(whole), state_of(rest));
  EXPECT_EQ(read_lines(first.log).size(), 14u);  // the resumed run appends
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(to_json_line(rest.history[i]), to_json_line(whole.history[7 + i]));

  // Another recipe is refused, naming both.
  TrainOptions wider = second;
  wider.size.ngf = 16;
  const std::string message = error_of([&] { train_quietly(wider); });
  EXPECT_TRUE(contains(message, "--resume '" + first.save + "'")) << message;
  EXPECT_TRUE(contains(message, "ngf 8")) << message;
  EXPECT_TRUE(contains(message, "ngf 16")) << message;
}

TEST_F(DcganTraining, StopRequestWritesCheckpointAndGrid) {
  TrainOptions o = tiny_run(*dir_, 100);
  o.save = *dir_ / "stopped.ckpt";
  o.samples = *dir_ / "stopped.png";
  std::ostringstream sink;
  TrainerHooks hooks = quiet_hooks(sink);
  hooks.should_stop = [](int64_t step) { return step == 3; };
  const TrainingResult r = run_training(o, hooks);
  EXPECT_EQ(r.status, RunStatus::Interrupted);
  EXPECT_EQ(r.steps, 3);
  EXPECT_TRUE(std::filesystem::exists(o.save));
  EXPECT_TRUE(std::filesystem::exists(o.samples));
  EXPECT_TRUE(contains(sink.str(), "stopped after step 3")) << sink.str();
}

// ---- where the data comes from ----

TEST(DcganData, MissingDataNamesTheFlagOrTheVariable) {
  TrainOptions o;
  o.data = "/nonexistent/cifar";
  std::string message = error_of([&] { train_quietly(o); });
  EXPECT_TRUE(contains(message, "--data '/nonexistent/cifar' does not exist")) << message;

  o.data = "";
  const char* saved = std::getenv("KILN_DATA");
  const std::optional<std::string> before = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("KILN_DATA", "/nonexistent/kiln-data", 1);
  message = error_of([&] { resolve_data_path(o); });
  if (before) ::setenv("KILN_DATA", before->c_str(), 1);
  else ::unsetenv("KILN_DATA");
  EXPECT_TRUE(contains(message, "KILN_DATA '/nonexistent/kiln-data' does not exist")) << message;
}

TEST(DcganData, FolderIsSearchedAsGetCifar10Searches) {
  TempDir dir("kiln-dcgan-data-test");
  TrainOptions o;
  o.data = dir.path().string();
  EXPECT_EQ(resolve_data_path(o), o.data);  // nothing inside: open_datasets says what it looked for
  std::ofstream(dir / "cifar10-jpeg.tar.gz") << "x";
  EXPECT_EQ(resolve_data_path(o), dir / "cifar10-jpeg.tar.gz");
  std::filesystem::create_directories(dir.path() / "cifar10-jpeg" / "train");
  std::filesystem::create_directories(dir.path() / "cifar10-jpeg" / "test");
  EXPECT_EQ(resolve_data_path(o), dir / "cifar10-jpeg");
  std::ofstream(dir / "cifar-10-binary.tar.gz") << "x";
  EXPECT_EQ(resolve_data_path(o), dir / "cifar-10-binary.tar.gz");
  o.data = dir / "cifar10-jpeg.tar.gz";  // a file is taken as given
  EXPECT_EQ(resolve_data_path(o), o.data);
}

// ---- the command line ----

TEST(DcganOptions, DefaultsAreThePapersRecipe) {
  const CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-dcgan"});
  ASSERT_TRUE(cl.options);
  const TrainOptions& o = *cl.options;
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.size.nz, 100);
  EXPECT_EQ(o.size.ngf, 64);
  EXPECT_EQ(o.size.ndf, 64);
  EXPECT_EQ(o.lr, 2e-4);
  EXPECT_EQ(o.beta1, 0.5);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.samples, "dcgan_samples.png");

  const CommandLine set = parse_command_line(std::vector<std::string>{
      "kiln-dcgan", "--data", "d", "--epochs", "3", "--steps", "40", "--batch-size", "32", "--ngf", "16", "--ndf",
      "24", "--nz", "50", "--seed", "7", "--samples", "g.png", "--sample-every", "10", "--log", "l.jsonl", "--save",
      "c.ckpt", "--resume", "c.ckpt", "--lr", "1e-3", "--threads", "1"});
  ASSERT_TRUE(set.options);
  EXPECT_EQ(set.options->data, "d");
  EXPECT_EQ(set.options->epochs, 3);
  EXPECT_EQ(set.options->steps, 40);
  EXPECT_EQ(set.options->batch_size, 32);
  EXPECT_EQ(set.options->size.ngf, 16);
  EXPECT_EQ(set.options->size.ndf, 24);
  EXPECT_EQ(set.options->size.nz, 50);
  EXPECT_EQ(set.options->seed, 7u);
  EXPECT_EQ(set.options->samples, "g.png");
  EXPECT_EQ(set.options->sample_every, 10);
  EXPECT_EQ(set.options->log, "l.jsonl");
  EXPECT_EQ(set.options->save, "c.ckpt");
  EXPECT_EQ(set.options->resume, "c.ckpt");
  EXPECT_EQ(set.options->lr, 1e-3);
  EXPECT_EQ(set.options->threads, 1);
}

TEST(DcganOptions, BadValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch-size", "1"}, "--batch-size must be at least 2"},
      {{"--epochs", "0"}, "--epochs must be from 1"},
      {{"--steps", "-1"}, "--steps must be non-negative"},
      {{"--ngf", "0"}, "--ngf must be at least 1"},
      {{"--ndf", "0"}, "--ndf must be at least 1"},
      {{"--nz", "0"}, "--nz must be at least 1"},
      {{"--lr", "0"}, "--lr must be positive"},
      {{"--beta1", "1"}, "--beta1 must be in [0, 1)"},
      {{"--samples", "grid.jpg"}, "--samples must name a .png file, got 'grid.jpg'"},
      {{"--sample-every", "-2"}, "--sample-every must be non-negative"},
      {{"--seed", "-1"}, "--seed: '-1' is not a non-negative integer"},
      {{"--epochs", "2.5"}, "--epochs: '2.5' is not an integer"},
      {{"--device", "tpu"}, "--device: unknown device 'tpu'"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string message = parse_error(args);
    EXPECT_TRUE(contains(message, expected)) << args[0] << " " << args[1] << ": " << message;
  }
  EXPECT_EQ(parse_error({"--batch-size", "8"}), "");
}

TEST(DcganOptions, OutputsAreTriedBeforeTraining) {
  TrainOptions o;
  o.data = "/nonexistent/cifar";
  o.samples = "/nonexistent-folder/grid.png";
  const std::string message = error_of([&] { train_quietly(o); });
  EXPECT_TRUE(contains(message, "--samples '/nonexistent-folder/grid.png'")) << message;
}

#ifdef KILN_DCGAN_EXE
TEST(DcganProgram, BadFlagExitsNonZeroSayingWhy) {
  TempDir dir("kiln-dcgan-program-test");
  const apps::testing::ProcessResult r =
      apps::testing::run_program(KILN_DCGAN_EXE, {"--batch-size", "1"}, dir / "stderr.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "kiln-dcgan: --batch-size must be at least 2")) << r.err;
  const apps::testing::ProcessResult help = apps::testing::run_program(KILN_DCGAN_EXE, {"--help"}, dir / "help.txt");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "--sample-every")) << help.out;
}
#endif

}  // namespace
}  // namespace kiln::apps::dcgan
