// ht-report without a browser: the run-directory reader on hand-written files
// (a step recorded twice, a line cut short, two launches in htrun's log,
// errors naming the file), the chart's points, and the page's sections.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "ht/core/error.h"
#include "ht/train/run.h"
#include "report/page.h"
#include "report/run_dir.h"
#include "report/svg_chart.h"

namespace ht::report {
namespace {

namespace fs = std::filesystem;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ht_report_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

constexpr const char* kMetrics =
    R"({"type":"run","model":"GPT test","num_parameters":1000,"mesh":"pp1 x dp2 x tp1","steps":3}
{"type":"step","step":1,"time_ms":1,"loss":5.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":1,"skipped":false,"skipped_steps":0,"checkpoint":false}
{"type":"step","step":2,"time_ms":2,"loss":null,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":0.5,"skipped":true,"skipped_steps":1,"checkpoint":true}
{"type":"step","step":2,"time_ms":3,"loss":4.5,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":0.5,"skipped":false,"skipped_steps":1,"checkpoint":true}
{"type":"eval","step":2,"val_loss":4.7}
{"type":"step","step":3,"time_ms":4,"loss":4.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":0.5,"skipped":false,"skipped_steps":1,"checkpoint":false}
{"type":"step","step":4,"ti)";

TEST_F(RunDirTest, ReadsEachStepOnceAndSkipsACutLine) {
  write("metrics.jsonl", kMetrics);
  const RunDir r = read_run_dir(dir_.string());
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[1].step, 2);
  EXPECT_DOUBLE_EQ(r.steps[1].loss, 4.5);  // the last record of step 2
  EXPECT_TRUE(r.steps[1].checkpoint);
  ASSERT_EQ(r.evals.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.run.fields.at("model")), "GPT test");
  EXPECT_FALSE(r.htrun);
}

TEST_F(RunDirTest, ErrorsNameTheFile) {
  try {
    read_run_dir((dir_ / "none").string());
    FAIL() << "a missing directory was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  try {
    read_run_dir(dir_.string());
    FAIL() << "a directory without metrics.jsonl was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl"), std::string::npos) << e.what();
  }
  write("metrics.jsonl", "{\"type\":\"run\"}\n");
  EXPECT_THROW(read_run_dir(dir_.string()), Error);
  write("metrics.jsonl", std::string("not json\n") + kMetrics);
  EXPECT_THROW(read_run_dir(dir_.string()), Error);
}

TEST_F(RunDirTest, HtrunLogLaunchesAndIncidents) {
  write("metrics.jsonl", kMetrics);
  write("htrun_report.json",
        R"({"verdict":"the job finished","exit_code":0,"wall_s":10,"productive_s":4,"goodput":0.4,"restarts":1,
            "incidents":[{"kind":"crash","rank":1,"node":1,"time":3,"detection_latency_s":0.5,"recovery_s":2,
                          "steps_lost":1,"resumed_from":1,"resume_tier":"disk","message":"<boom>"}],
            "cordoned_nodes":[]})");
  write("htrun_job.log",
        "htrun: launch 1\nstep 1/3 | loss 5.0000 | lr 1e-3 | 10 ms\nstep 2/3 | loss nan | lr 1e-3 | 10 ms\n"
        "step 0/3 | val loss 5.1\nhtrun: launch 2\nstep 2/3 | loss 4.5000 | lr 1e-3 | 10 ms\n"
        "step 3/3 | loss 4.0000 | lr 1e-3 | 10 ms\n");
  const RunDir r = read_run_dir(dir_.string());
  ASSERT_TRUE(r.htrun);
  EXPECT_EQ(r.launches, 2);
  ASSERT_EQ(r.logged_steps.size(), 4u);
  EXPECT_EQ(r.logged_steps[2].launch, 1);

  const std::string page = render_page(r, {});
  EXPECT_EQ(count(page, "<g class=\"incident\""), 1u);
  EXPECT_EQ(count(page, "&lt;boom&gt;"), 1u);  // the rank's message is escaped
  EXPECT_EQ(count(page, "id=\"goodput\">40.0%"), 1u);
  // The first launch's two steps (one non-finite) in their own series.
  const std::regex earlier(
      R"(<g class="points" data-series="loss_earlier_launches"[^>]*>((?:<circle.*?</circle>)*)</g>)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(page, m, earlier));
  EXPECT_EQ(count(m[1].str(), "<circle"), 2u);
  EXPECT_EQ(count(m[1].str(), "nonfinite"), 1u);
}

TEST_F(RunDirTest, ADamagedHtrunReportIsNamed) {
  write("metrics.jsonl", kMetrics);
  write("htrun_report.json", R"({"verdict":"the job finished","exit_code":0,"wall_s":10,"productive_s":4,"incid)");
  try {
    read_run_dir(dir_.string());
    FAIL() << "a report cut short was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("htrun_report.json' is not htrun's report"), std::string::npos) << e.what();
  }
  write("htrun_report.json", R"({"verdict":"the job finished","wall_s":10,"productive_s":4,"incidents":[{"kind":1}]})");
  try {
    read_run_dir(dir_.string());
    FAIL() << "an incident of no kind was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'kind'"), std::string::npos) << e.what();
  }
}

TEST(ProgressLine, AsFitWritesIt) {
  // ht/train/run.h's example line, one under loss scaling with a save, and lines that are not progress.
  auto p = train::parse_progress_line("step 120/200 | loss 2.4511 | lr 6.12e-04 | norm 0.412 | 402 ms | 2.5k tok/s");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 120);
  EXPECT_EQ(p->steps, 200);
  EXPECT_DOUBLE_EQ(p->loss, 2.4511);
  p = train::parse_progress_line(
      "step 7/8 | loss nan | lr 1.00e-03 | norm nan | scale 512 | SKIPPED (overflow; 1 so far) | 5 ms | 12 tok/s | "
      "checkpoint (3 ms stall)");
  ASSERT_TRUE(p);
  EXPECT_TRUE(std::isnan(p->loss));
  for (const char* other : {"step 0/3 | val loss 5.1000", "# preempted at step 4: checkpoint committed",
                            "step 3/3 | loss 4.0", "step x/3 | loss 4.0 | lr 1", "step 3/3 | loss 4.0x | lr 1",
                            "htrun: launch 2", "", "[1,0]<stdout>:step 3/3 | loss 4.0 | lr 1"})
    EXPECT_FALSE(train::parse_progress_line(other)) << other;
}

TEST_F(RunDirTest, PageHasOnePointPerStepAndSaysWhatIsMissing) {
  write("metrics.jsonl", kMetrics);
  const RunDir r = read_run_dir(dir_.string());
  const std::string plain = render_page(r, {});
  EXPECT_EQ(count(plain, "data-loss=\""), 3u);
  EXPECT_EQ(count(plain, "data-val-loss=\""), 1u);
  EXPECT_EQ(count(plain, "id=\"memory-none\""), 1u);
  EXPECT_EQ(count(plain, "MFU is not shown"), 1u);
  EXPECT_EQ(count(plain, "data-mfu-percent"), 0u);
  EXPECT_EQ(count(plain, "http"), count(plain, "xmlns=\"http://www.w3.org/2000/svg\""));  // nothing fetched

  // MFU = 6 x 1000 parameters x 6400 tokens/s / (2 ranks x 1e-6 TFLOP/s) = 1920%.
  const std::string with_peak = render_page(r, {.peak_tflops = 1e-6});
  EXPECT_EQ(count(with_peak, "data-mfu-percent=\"1920\""), 3u);
}

TEST_F(RunDirTest, MfuTakesTheRunsOwnFlopsPerTokenAndPeak) {
  // As a training program records them: the peak in the run line, the
  // model's own FLOPs per token (not 6N) in every step line.
  write("metrics.jsonl",
        R"({"type":"run","model":"GPT test","num_parameters":1000,"mesh":"pp1 x dp2 x tp1","steps":2,"peak_tflops":1e-6,"peak_source":"measured"}
{"type":"step","step":1,"time_ms":1,"loss":5.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":1,"skipped":false,"skipped_steps":0,"checkpoint":false,"flops_per_token":2000,"mfu":640}
{"type":"step","step":2,"time_ms":2,"loss":4.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":1,"skipped":false,"skipped_steps":0,"checkpoint":false,"flops_per_token":2000,"mfu":640}
)");
  const RunDir r = read_run_dir(dir_.string());
  // 2000 x 6400 / (2 ranks x 1e-6 TFLOP/s) = 640%, with no --peak-tflops given.
  const std::string page = render_page(r, {});
  EXPECT_EQ(count(page, "data-mfu-percent=\"640\""), 2u);
  EXPECT_EQ(count(page, "MFU is not shown"), 0u);
  EXPECT_EQ(count(page, "the run's: measured"), 1u);
  // A peak given to ht-report replaces the run's.
  EXPECT_EQ(count(render_page(r, {.peak_tflops = 2e-6}), "data-mfu-percent=\"320\""), 2u);
}

TEST_F(RunDirTest, ExpertLoadIsChartedPerLayer) {
  // Two mixture-of-experts layers over two steps, as fit writes them.
  write("metrics.jsonl",
        R"({"type":"run","model":"Llama test","num_parameters":1000,"mesh":"pp1 x dp1 x tp1","steps":2}
{"type":"step","step":1,"time_ms":1,"loss":5.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":1,"skipped":false,"skipped_steps":0,"checkpoint":false,"experts.layers.0.mlp":"60 20 30 18","experts.layers.0.mlp.max_over_mean":1.875,"experts.layers.1.mlp":"32 32 32 32","experts.layers.1.mlp.max_over_mean":1.0,"moe_aux_loss":0.02}
{"type":"step","step":2,"time_ms":2,"loss":4.0,"step_ms":10,"tokens":64,"tokens_per_s":6400,"loss_scale":1,"skipped":false,"skipped_steps":0,"checkpoint":false,"experts.layers.0.mlp":"40 30 30 28","experts.layers.0.mlp.max_over_mean":1.25,"experts.layers.1.mlp":"32 32 32 32","experts.layers.1.mlp.max_over_mean":1.0,"moe_aux_loss":0.02}
)");
  const std::string page = render_page(read_run_dir(dir_.string()), {});
  EXPECT_EQ(count(page, "id=\"chart-experts\""), 1u);
  EXPECT_EQ(count(page, "data-expert-load=\""), 4u);
  EXPECT_EQ(count(page, "data-expert-load=\"1.875\""), 1u);
  EXPECT_EQ(count(page, "layers.1.mlp"), count(page, "layers.0.mlp"));
  // A dense model has no such chart.
  write("metrics.jsonl", kMetrics);
  EXPECT_EQ(count(render_page(read_run_dir(dir_.string()), {}), "chart-experts"), 0u);
}

TEST(SvgChart, EveryPointIsAnElement) {
  Series s{.name = "loss", .color = "#000", .y_key = "loss", .x = {1, 2, 3, 4, 5}, .y = {5, 4, std::nan(""), 3, 2}};
  const std::string svg = line_chart({.id = "c", .title = "t"}, {s});
  EXPECT_EQ(count(svg, "<circle"), 5u);
  EXPECT_EQ(count(svg, "nonfinite"), 1u);
  EXPECT_EQ(count(svg, "data-step=\"3\" data-loss=\"nan\""), 1u);
  // A series that goes back (a relaunch redoing steps) is drawn as two lines.
  Series redo{.name = "l", .color = "#000", .y_key = "loss", .x = {1, 2, 3, 2, 3}, .y = {5, 4, 3, 4, 3}};
  EXPECT_EQ(count(line_chart({.id = "d"}, {redo}), "<polyline"), 2u);
}

TEST(SvgChart, MeshWorldSizeAndEscaping) {
  EXPECT_EQ(mesh_world_size("pp1 x dp3 x tp1"), 3);
  EXPECT_EQ(mesh_world_size("pp2 x dp2 x tp2"), 8);
  EXPECT_EQ(mesh_world_size(""), 0);
  EXPECT_EQ(html_escape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
}

}  // namespace
}  // namespace ht::report
