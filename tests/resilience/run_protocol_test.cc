// The run protocol (ht/resilience/run_protocol.h): phase names and order,
// the step and start-up rules, exit and incident kinds, each record written
// as docs/htrun.md says and read back, and damaged text refused, not crashed on.
#include "ht/resilience/run_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ht/core/error.h"

namespace ht::resilience {
namespace {

TEST(RunProtocol, PhasesInTheEnginesOrder) {
  // The engine's step (src/train/engine.cc) and what comes before and after it.
  const std::vector<std::string> order{"launch",        "start",          "data",       "forward-backward",
                                       "gradient-reduction", "optimizer", "replica-check", "loss-reduction",
                                       "checkpoint",    "snapshot",       "step-done",  "evaluate",
                                       "finish",        "other"};
  ASSERT_EQ(int(order.size()), kPhaseCount);
  for (int i = 0; i < kPhaseCount; ++i) {
    EXPECT_EQ(phase_name(Phase(i)), order[std::size_t(i)]);
    EXPECT_EQ(parse_phase(order[std::size_t(i)]), Phase(i));
    if (i > 0) EXPECT_LT(Phase(i - 1), Phase(i)) << order[std::size_t(i)];
  }
  EXPECT_EQ(parse_phase("forward"), std::nullopt);
  EXPECT_EQ(parse_phase(""), std::nullopt);
}

TEST(RunProtocol, StepCompletedAndStarting) {
  for (int i = 0; i < kPhaseCount; ++i) {
    const Phase p = Phase(i);
    const bool done = p == Phase::kStepDone || p == Phase::kEvaluate || p == Phase::kFinish;
    EXPECT_EQ(step_completed_in(p), done) << phase_name(p);
    EXPECT_EQ(completed_step(7, p), done ? 7 : 6) << phase_name(p);
    EXPECT_EQ(starting(p), p == Phase::kLaunch || p == Phase::kStart) << phase_name(p);
  }
}

TEST(RunProtocol, ExitKinds) {
  const std::vector<std::pair<int, std::string>> table{
      {kExitOk, "ok"},           {kExitError, "error"},           {kExitCommFailure, "comm-failure"},
      {kExitHang, "hang"},       {kExitDivergence, "divergence"}, {kExitPreempted, "preempted"},
      {kExitCorruption, "corruption"}, {kExitStraggler, "straggler"}, {kExitFenced, "fenced"},
      {1, "error"},              {137, "crash"}};
  for (const auto& [code, name] : table) {
    EXPECT_EQ(exit_kind(code), name) << code;
    EXPECT_EQ(parse_exit_kind(name), exit_kind_of(code)) << name;
  }
  EXPECT_EQ(exit_code_for(Error(ErrorKind::kComm, "x")), kExitCommFailure);
  EXPECT_EQ(exit_code_for(Error(ErrorKind::kDivergence, "x")), kExitDivergence);
  EXPECT_EQ(exit_code_for(Error(ErrorKind::kCorruption, "x")), kExitCorruption);
  EXPECT_EQ(exit_code_for(Error(ErrorKind::kConfig, "x")), kExitError);
  EXPECT_EQ(exit_code_for(std::runtime_error("x")), kExitError);
}

TEST(RunProtocol, IncidentKinds) {
  const std::vector<std::string> names{"crash",     "host-lost", "comm-failure", "hang",    "divergence",  "corruption",
                                       "straggler", "preemption", "error",       "failure", "no-heartbeat"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(incident_kind_name(IncidentKind(i)), names[i]);
    EXPECT_EQ(parse_incident_kind(names[i]), IncidentKind(i));
  }
  // An exit record reports its own failure, except a peer's (comm-failure),
  // a clean exit and an older launch's.
  EXPECT_EQ(incident_of_exit(ExitKind::kOk), std::nullopt);
  EXPECT_EQ(incident_of_exit(ExitKind::kCommFailure), std::nullopt);
  EXPECT_EQ(incident_of_exit(ExitKind::kFenced), std::nullopt);
  EXPECT_EQ(incident_of_exit(ExitKind::kPreempted), IncidentKind::kPreemption);
  EXPECT_EQ(incident_of_exit(ExitKind::kStraggler), IncidentKind::kStraggler);
  EXPECT_EQ(incident_of_exit(ExitKind::kError), IncidentKind::kError);
  EXPECT_EQ(incident_of_exit(ExitKind::kHang), IncidentKind::kHang);
}

TEST(RunProtocol, Epochs) {
  EXPECT_TRUE(of_launch(3, 3));
  EXPECT_TRUE(of_launch(0, 3)) << "a record that says no epoch";
  EXPECT_TRUE(of_launch(2, 0)) << "no fencing";
  EXPECT_FALSE(of_launch(2, 3));
}

TEST(RunProtocol, HeartbeatAsDocumented) {
  const Heartbeat b{.rank = 1,
                    .host = "h1",
                    .pid = 42,
                    .step = 3,
                    .phase = Phase::kLossReduction,
                    .time_ms = 1700000000123,
                    .progress_ms = 1700000000100,
                    .epoch = 2,
                    .comm_wait_ms = 2500};
  const std::string text = format_heartbeat(b);
  EXPECT_EQ(text,
            R"({"comm_wait_ms":2500,"epoch":2,"host":"h1","phase":"loss-reduction","pid":42,)"
            R"("progress_ms":1700000000100,"rank":1,"step":3,"time_ms":1700000000123})");
  const auto back = parse_heartbeat(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->host, "h1");
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->step, 3);
  EXPECT_EQ(back->phase, Phase::kLossReduction);
  EXPECT_EQ(back->time_ms, 1700000000123);
  EXPECT_DOUBLE_EQ(back->progress_s(), 1700000000.1);
  EXPECT_EQ(back->epoch, 2);
  EXPECT_EQ(back->comm_wait_ms, 2500);
}

TEST(RunProtocol, HeartbeatsOfOtherProgramsAndDamage) {
  // Another program's phase, no host or epoch, times as floats: still a heartbeat.
  const auto other = parse_heartbeat(R"({"rank":0,"pid":1,"step":2,"phase":"forward","time_ms":5.5e3,"progress_ms":4000})");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->phase, Phase::kOther);
  EXPECT_EQ(other->time_ms, 5500);
  EXPECT_EQ(other->epoch, 0);
  for (const char* damaged : {"", "{", "[]", "null", R"({"rank":0})",  // half written, not an object, fields missing
                              R"({"rank":"0","pid":1,"step":2,"phase":"data","time_ms":1,"progress_ms":1})",
                              R"({"rank":0,"pid":1,"step":2,"phase":3,"time_ms":1,"progress_ms":1})",
                              R"({"rank":1e300,"pid":1,"step":2,"phase":"data","time_ms":1,"progress_ms":1})",
                              R"({"rank":0,"pid":1,"step":2,"phase":"data","time_ms":1,"progress_ms":1,"host":7})"})
    EXPECT_EQ(parse_heartbeat(damaged), std::nullopt) << damaged;
}

TEST(RunProtocol, ExitRecordAsDocumented) {
  const ExitRecord r{.rank = 2,
                     .code = kExitCommFailure,
                     .kind = ExitKind::kCommFailure,
                     .step = 9,
                     .phase = Phase::kGradientReduction,
                     .time_ms = 1000,
                     .message = "all_reduce timed out",
                     .blamed_ranks = {3},
                     .epoch = 4};
  const std::string text = format_exit_record(r);
  EXPECT_EQ(text,
            R"({"blamed_ranks":[3],"code":74,"epoch":4,"kind":"comm-failure","message":"all_reduce timed out",)"
            R"("phase":"gradient-reduction","rank":2,"step":9,"time_ms":1000})");
  const auto back = parse_exit_record(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, ExitKind::kCommFailure);
  EXPECT_EQ(back->blamed_ranks, std::vector<int>{3});
  EXPECT_EQ(back->phase, Phase::kGradientReduction);
  EXPECT_EQ(back->message, r.message);
  // Every field may be missing; a kind the protocol does not name is the code's.
  const auto bare = parse_exit_record(R"({"code":76,"kind":"mystery"})");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->kind, ExitKind::kDivergence);
  EXPECT_EQ(bare->rank, -1);
  EXPECT_EQ(bare->phase, Phase::kOther);
  for (const char* damaged : {"{\"rank\":", R"({"blamed_ranks":"3"})", R"({"blamed_ranks":[1,"x"]})",
                              R"({"message":5})", R"({"code":"74"})"})
    EXPECT_EQ(parse_exit_record(damaged), std::nullopt) << damaged;
}

TEST(RunProtocol, WritersNeverThrow) {
  ExitRecord r;
  r.message = "cannot open '\xff\xfe'";  // not UTF-8
  const std::string text = format_exit_record(r);
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos) << text;
  EXPECT_TRUE(parse_exit_record(text));
}

TEST(RunProtocol, MetricsLinesAsDocumented) {
  RunLine run;
  run.time_ms = 1000;
  run.resumed_from = 8;
  run.resume_tier = "memory+peer";
  run.resume_ms = 12.5;
  run.fields = {{"model", std::string("gpt")},
                {"steps", std::int64_t(20)},
                {"lr", 0.5},
                {"seed", std::uint64_t(18446744073709551615ull)},
                {"stage_layers", std::vector<std::int64_t>{2, 2}}};
  run.epoch = 3;
  const std::string run_text = format_metrics_line(run);
  EXPECT_EQ(run_text,
            R"({"epoch":3,"lr":0.5,"model":"gpt","resume_ms":12.5,"resume_tier":"memory+peer","resumed_from":8,)"
            R"("seed":18446744073709551615,"stage_layers":[2,2],"steps":20,"time_ms":1000,"type":"run"})");
  const auto run_back = parse_metrics_line(run_text);
  ASSERT_TRUE(run_back && std::holds_alternative<RunLine>(*run_back));
  const RunLine& r = std::get<RunLine>(*run_back);
  EXPECT_EQ(r.resumed_from, 8);
  EXPECT_EQ(r.resume_tier, "memory+peer");
  EXPECT_EQ(r.fields, run.fields);
  EXPECT_EQ(r.epoch, 3);

  StepLine step;
  step.step = 5;
  step.time_ms = 2000;
  step.loss = std::nan("");
  step.lr = 0.25;
  step.grad_norm = 1;
  step.step_ms = 12.5;
  step.tokens = 64;
  step.tokens_per_s = 5120;
  step.loss_scale = 1;
  step.skipped = true;
  step.skipped_steps = 1;
  step.fields = {{"seq_len", std::int64_t(32)}, {"loss", std::string("a program's own 'loss' loses")}};
  const std::string step_text = format_metrics_line(step);
  EXPECT_EQ(step_text,
            R"({"checkpoint":false,"grad_norm":1.0,"loss":null,"loss_scale":1.0,"lr":0.25,"seq_len":32,)"
            R"("skipped":true,"skipped_steps":1,"snapshot":false,"step":5,"step_ms":12.5,"time_ms":2000,)"
            R"("tokens":64,"tokens_per_s":5120.0,"type":"step"})")
      << "no epoch field for epoch 0";
  const auto step_back = parse_metrics_line(step_text);
  ASSERT_TRUE(step_back && std::holds_alternative<StepLine>(*step_back));
  const StepLine& s = std::get<StepLine>(*step_back);
  EXPECT_TRUE(std::isnan(s.loss));
  EXPECT_EQ(s.step, 5);
  EXPECT_DOUBLE_EQ(s.time_s(), 2.0);
  EXPECT_TRUE(s.skipped);
  EXPECT_EQ(s.fields, (Fields{{"seq_len", std::int64_t(32)}}));

  EvalLine eval{.step = 4, .val_loss = 2.5, .val_samples = 8, .metrics = {{"accuracy", 0.75}}, .epoch = 0};
  const std::string eval_text = format_metrics_line(eval);
  EXPECT_EQ(eval_text, R"({"step":4,"type":"eval","val_accuracy":0.75,"val_loss":2.5,"val_samples":8})");
  const auto eval_back = parse_metrics_line(eval_text);
  ASSERT_TRUE(eval_back && std::holds_alternative<EvalLine>(*eval_back));
  EXPECT_EQ(std::get<EvalLine>(*eval_back).metrics, eval.metrics);
}

TEST(RunProtocol, MetricsLinesOfOtherTypesAndDamage) {
  EXPECT_EQ(parse_metrics_line(R"({"type":"note","text":"hi"})"), std::nullopt);
  EXPECT_EQ(parse_metrics_line(R"({"step":1})"), std::nullopt);
  // A hand-written line with the fields it has: the others their defaults.
  const auto sparse = parse_metrics_line(R"({"type":"step","step":2})");
  ASSERT_TRUE(sparse);
  EXPECT_TRUE(std::isnan(std::get<StepLine>(*sparse).loss)) << "a missing loss is not a zero loss";
  EXPECT_EQ(std::get<StepLine>(*sparse).time_ms, 0);
  for (const char* damaged : {"not json", "{\"type\":\"step\",\"st", "[1,2]", R"({"type":"step","step":"2"})",
                              R"({"type":"run","resumed_from":"x"})", R"({"type":"step","skipped":1})",
                              R"({"type":"eval","val_accuracy":"high"})"}) {
    try {
      (void)parse_metrics_line(damaged);
      ADD_FAILURE() << "read: " << damaged;
    } catch (const ProtocolError& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
  try {
    (void)parse_metrics_line(R"({"type":"step","step":"2"})");
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'step' holds string"), std::string::npos) << e.what();
  }
}

TEST(RunProtocol, Paths) {
  EXPECT_EQ(heartbeat_path("runs/a", 3), "runs/a/heartbeat/rank_3.json");
  EXPECT_EQ(exit_record_path("runs/a", 0), "runs/a/exit/rank_0.json");
  EXPECT_EQ(metrics_path("runs/a"), "runs/a/metrics.jsonl");
  EXPECT_EQ(launch_epoch_path("runs/a"), "runs/a/launch_epoch");
}

}  // namespace
}  // namespace ht::resilience
