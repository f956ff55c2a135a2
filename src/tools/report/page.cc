// The report page: header facts, training curves, checkpoints, memory, and
// htrun's incidents and goodput, assembled from svg_chart's pieces.
#include "report/page.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "ht/train/mfu.h"
#include "report/svg_chart.h"

namespace ht::report {
namespace {

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 920px; color: #1d2430; }
h1 { font-size: 21px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 26px 0 6px; border-bottom: 1px solid #d8dde6; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
th { color: #566; font-weight: 600; } .facts td:first-child { color: #566; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.card { border: 1px solid #d8dde6; border-radius: 6px; padding: 6px 12px; min-width: 120px; }
.card b { display: block; font-size: 18px; } .card span { color: #566; font-size: 12px; }
.note { color: #566; font-size: 12.5px; } .bad { color: #b3261e; } .good { color: #1b7f3b; }
svg.chart { display: block; margin: 6px 0; } svg .title { font-weight: 600; font-size: 13px; }
svg .tick, svg .legend text, svg .note { font-size: 11px; fill: #566; } svg .axis { font-size: 12px; fill: #344; }
svg .grid { stroke: #eef0f4; } svg .frame { fill: none; stroke: #b8c0cc; }
svg .line { stroke-width: 1.3; } svg .mark { stroke: #7a5cc4; stroke-dasharray: 2 3; }
svg .nonfinite { fill: #b3261e; } svg .detect { fill: #e8a33d; } svg .recover { fill: #5b8def; }
svg .failure { stroke: #b3261e; stroke-width: 2; }
)";

// Counts every chart's points per series once the page has rendered; the test
// reads the counts from #rendered in the DOM chromium dumps.
constexpr const char* kScript = R"(<script>
(function () {
  var counts = {};
  document.querySelectorAll('g.points').forEach(function (g) {
    counts[g.dataset.series] = (counts[g.dataset.series] || 0) + g.querySelectorAll('circle').length;
  });
  var p = document.getElementById('rendered');
  p.dataset.points = JSON.stringify(counts);
  p.textContent = 'Points drawn: ' + Object.keys(counts).map(function (k) { return k + ' ' + counts[k]; }).join(', ');
})();
</script>
)";

std::string fmt_si(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::abs(v);
  return a >= 1e9   ? fmt::format("{:.2f}G", v / 1e9)
         : a >= 1e6 ? fmt::format("{:.2f}M", v / 1e6)
         : a >= 1e3 ? fmt::format("{:.1f}k", v / 1e3)
                    : fmt::format("{:.3g}", v);
}

// A field of the run line as the page shows it: a string as it is, anything
// else as JSON writes it; "-" when the run did not record it.
std::string field_text(const resilience::Fields& fields, const char* key) {
  const auto it = fields.find(key);
  if (it == fields.end()) return "-";
  struct Text {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(std::uint64_t u) const { return std::to_string(u); }
    std::string operator()(double d) const {
      if (!std::isfinite(d)) return "null";
      const std::string t = fmt::format("{}", d);
      return t.find_first_of(".e") == std::string::npos ? t + ".0" : t;  // as JSON writes a float
    }
    std::string operator()(const std::string& t) const { return t; }
    std::string operator()(const std::vector<std::int64_t>& v) const { return fmt::format("[{}]", fmt::join(v, ",")); }
  };
  return html_escape(std::visit(Text{}, it->second));
}

double field_number(const resilience::Fields& fields, const char* key) {
  const auto it = fields.find(key);
  if (it == fields.end()) return 0;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return double(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&it->second)) return double(*u);
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  return 0;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string card(const std::string& value, const std::string& label) {
  return fmt::format("<div class=\"card\"><b>{}</b><span>{}</span></div>", value, label);
}

std::string header(const RunDir& r, double mfu_median) {
  const StepRecord& last = r.steps.back();
  std::vector<double> tps, ms;
  for (const StepRecord& s : r.steps) tps.push_back(s.tokens_per_s), ms.push_back(s.step_ms);
  std::string h = fmt::format("<h1>Run report: {}</h1>\n<p class=\"note\">{} &middot; written by ht-report</p>\n",
                              field_text(r.run.fields, "model"), html_escape(r.path));
  h += "<div class=\"cards\">";
  h += card(fmt::format("{} / {}", last.step, field_text(r.run.fields, "steps")), "steps done / planned");
  h += card(fmt::format("{:.4f}", last.loss), "last loss");
  if (!r.evals.empty()) h += card(fmt::format("{:.4f}", r.evals.back().val_loss), "last val loss");
  h += card(fmt_si(median(tps)), "tokens/s (median)");
  h += card(fmt::format("{:.1f} ms", median(ms)), "step time (median)");
  h += card(std::isfinite(mfu_median) ? fmt::format("{:.1f}%", mfu_median) : std::string("-"),
            std::isfinite(mfu_median) ? "MFU (median)" : "MFU: give --peak-tflops");
  h += card(fmt::format("{}", last.skipped_steps), "skipped steps");
  if (r.htrun) h += card(fmt::format("{:.1f}%", 100 * r.htrun->goodput()), "goodput (htrun)");
  h += "</div>\n<table class=\"facts\">\n";
  const char* keys[][2] = {{"model", "model"},
                           {"num_parameters", "parameters"},
                           {"mesh", "mesh"},
                           {"precision", "precision"},
                           {"device", "device"},
                           {"micro_batch", "micro-batch"},
                           {"grad_accum", "accumulation"},
                           {"seq_len", "sequence length"},
                           {"zero_stage", "ZeRO stage"},
                           {"schedule", "schedule"},
                           {"version", "hypertrain"},
                           {"git_commit", "commit"}};
  for (const auto& [key, label] : keys)
    if (r.run.fields.contains(key))
      h += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", label, field_text(r.run.fields, key));
  if (r.run.resumed_from >= 0)
    h += fmt::format("<tr><td>resumed</td><td>from step {} ({} tier, loaded in {:.0f} ms)</td></tr>\n",
                     r.run.resumed_from, html_escape(r.run.resume_tier), r.run.resume_ms);
  return h + "</table>\n";
}

// Each mixture-of-experts layer's balance over the steps: its busiest
// expert's tokens over the mean ("experts.<layer>.max_over_mean", as fit
// writes it); nothing for a model without one.
std::string expert_load_chart(const RunDir& r) {
  static const char* const kColors[] = {"#2b6cb0", "#d97706", "#2f855a", "#7a5cc4", "#b3261e", "#0f766e"};
  const std::string prefix = "experts.", suffix = ".max_over_mean";
  std::map<std::string, Series> by_layer;  // in name order
  for (const StepRecord& s : r.steps)
    for (const auto& [key, value] : s.fields) {
      const double* v = std::get_if<double>(&value);
      if (!v || key.size() <= prefix.size() + suffix.size() || key.rfind(prefix, 0) != 0 ||
          key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string layer = key.substr(prefix.size(), key.size() - prefix.size() - suffix.size());
      Series& series = by_layer[layer];
      series.x.push_back(static_cast<double>(s.step));
      series.y.push_back(*v);
    }
  if (by_layer.empty()) return "";
  std::vector<Series> series;
  for (auto& [layer, s] : by_layer) {
    s.name = layer;
    s.color = kColors[series.size() % std::size(kColors)];
    s.y_key = "expert-load";
    series.push_back(std::move(s));
  }
  return line_chart({.id = "chart-experts",
                     .title = "Expert load: the busiest expert's tokens over the mean, per mixture-of-experts layer",
                     .x_label = "step",
                     .y_label = "max / mean"},
                    series);
}

std::string curves(const RunDir& r, const std::vector<double>& mfu) {
  Series loss{.name = "loss", .color = "#2b6cb0", .y_key = "loss"},
      val{.name = "val_loss", .color = "#d97706", .y_key = "val-loss"};
  Series tps{.name = "tokens_per_s", .color = "#2f855a", .y_key = "tokens-per-s"};
  Series scale{.name = "loss_scale", .color = "#7a5cc4", .y_key = "loss-scale"};
  Series skipped{.name = "skipped_steps", .color = "#b3261e", .y_key = "skipped-steps"};
  std::vector<double> ckpt_steps;
  for (const StepRecord& s : r.steps) {
    const double x = static_cast<double>(s.step);
    loss.x.push_back(x), loss.y.push_back(s.loss);
    tps.x.push_back(x), tps.y.push_back(s.tokens_per_s);
    scale.x.push_back(x), scale.y.push_back(s.loss_scale);
    skipped.x.push_back(x), skipped.y.push_back(static_cast<double>(s.skipped_steps));
    if (s.checkpoint) ckpt_steps.push_back(x);
  }
  for (const EvalRecord& e : r.evals) val.x.push_back(static_cast<double>(e.step)), val.y.push_back(e.val_loss);

  std::vector<Series> loss_series;
  // Earlier launches under htrun: their steps are only in htrun_job.log
  // (each relaunch rewrites metrics.jsonl), drawn dashed, redone steps included.
  const int last_launch = r.launches - 1;
  Series earlier{.name = "loss_earlier_launches", .color = "#9aa5b4", .y_key = "loss", .dashed = true};
  for (const LoggedStep& s : r.logged_steps)
    if (s.launch < last_launch) earlier.x.push_back(static_cast<double>(s.step)), earlier.y.push_back(s.loss);
  if (!earlier.x.empty()) loss_series.push_back(earlier);
  loss_series.push_back(loss);
  if (!val.x.empty()) loss_series.push_back(val);

  std::string out = "<h2>Training</h2>\n";
  out += line_chart({.id = "chart-loss",
                     .title = "Loss and validation loss",
                     .x_label = "step",
                     .y_label = "loss",
                     .x_marks = ckpt_steps,
                     .x_marks_label = "checkpoint"},
                    loss_series);
  if (!earlier.x.empty())
    out += fmt::format(
        "<p class=\"note\">Grey, dashed: the loss of the {} earlier launch(es) from htrun_job.log (each "
        "relaunch rewrites metrics.jsonl); steps redone after a resume appear twice.</p>\n",
        last_launch);
  if (r.steps.front().step > 1)
    out += fmt::format(
        "<p class=\"note\">metrics.jsonl holds the steps from step {} on (the last launch); the "
        "charts below show those.</p>\n",
        r.steps.front().step);
  out += line_chart({.id = "chart-tokens", .title = "Throughput", .x_label = "step", .y_label = "tokens/s"}, {tps});
  if (!mfu.empty()) {
    Series m{.name = "mfu", .color = "#c05621", .y_key = "mfu-percent", .x = tps.x, .y = mfu};
    out +=
        line_chart({.id = "chart-mfu", .title = "Model FLOPs utilisation", .x_label = "step", .y_label = "MFU %"}, {m});
  }
  out += expert_load_chart(r);
  out += line_chart(
      {.id = "chart-scale", .title = "Loss scale", .x_label = "step", .y_label = "scale", .height = 180, .log_y = true},
      {scale});
  out += line_chart({.id = "chart-skipped",
                     .title = "Skipped steps (cumulative: overflow or non-finite loss)",
                     .x_label = "step",
                     .y_label = "steps",
                     .height = 180},
                    {skipped});
  return out;
}

/// One rank's peak: --peak-tflops, else the run's own (measured or given to it).
double peak_tflops(const RunDir& r, const PageOptions& o) {
  return o.peak_tflops > 0 ? o.peak_tflops : field_number(r.run.fields, "peak_tflops");
}

/// Whether the steps carry the model's own FLOPs per token (runs from before that was recorded do not).
bool steps_have_flops(const RunDir& r) {
  return !r.steps.empty() && field_number(r.steps.front().fields, "flops_per_token") > 0;
}

/// MFU in percent, one a step: the model's own FLOPs per token as the run
/// recorded them (6N for runs that did not), over the ranks' peak; none
/// without a peak.
std::vector<double> mfu_series(const RunDir& r, const PageOptions& o, int world) {
  const double peak = peak_tflops(r, o), params = field_number(r.run.fields, "num_parameters");
  const bool recorded = steps_have_flops(r);
  std::vector<double> mfu;
  if (peak <= 0 || !(params > 0 || recorded)) return mfu;
  for (const StepRecord& s : r.steps) {
    const double flops = recorded ? field_number(s.fields, "flops_per_token") : 6 * params;
    mfu.push_back(ht::train::mfu_percent(flops, s.tokens_per_s, world, peak));
  }
  return mfu;
}

std::string mfu_note(const RunDir& r, const PageOptions& o, int world) {
  const double peak = peak_tflops(r, o);
  if (peak <= 0)
    return "<p class=\"note\">MFU is not shown: the run records no device peak. Give <code>ht-report --peak-tflops "
           "T</code> (one rank's dense peak in TFLOP/s for the run's precision) to add it.</p>\n";
  const std::string source = o.peak_tflops > 0 ? "given with --peak-tflops"
                                               : fmt::format("the run's: {}", field_text(r.run.fields, "peak_source"));
  if (steps_have_flops(r))
    return fmt::format(
        "<p class=\"note\">MFU = the model's FLOPs per token ({} at this run's sequence length, attention included) "
        "&times; tokens/s / ({} rank(s) &times; {:.3g} TFLOP/s peak, {}).</p>\n",
        fmt_si(field_number(r.steps.front().fields, "flops_per_token")), world, peak, source);
  return fmt::format(
      "<p class=\"note\">MFU = 6 &times; {} parameters &times; tokens/s / ({} rank(s) &times; {:.3g} "
      "TFLOP/s peak, {}); 6N per token leaves out attention's FLOPs (the run recorded no FLOPs per token).</p>\n",
      fmt_si(field_number(r.run.fields, "num_parameters")), world, peak, source);
}

std::string memory(const RunDir& r) {
  std::map<std::string, Series> by_key;
  for (const StepRecord& s : r.steps)
    for (const auto& [key, bytes] : memory_bytes(s)) {
      Series& se = by_key[key];
      se.name = key, se.y_key = "bytes";
      se.x.push_back(static_cast<double>(s.step)), se.y.push_back(bytes);
    }
  std::string out = "<h2>Memory</h2>\n";
  if (by_key.empty())
    return out +
           "<p class=\"note\" id=\"memory-none\">This run recorded no memory figures: metrics.jsonl has no "
           "<code>*_bytes</code> field per step, and nothing else in the run directory holds them. For the "
           "model's estimate per category, run <code>ht-plan</code> or the program with "
           "<code>--dry-run</code>.</p>\n";
  const char* colors[] = {"#2b6cb0", "#d97706", "#2f855a", "#7a5cc4", "#b3261e", "#319795"};
  std::vector<Series> series;
  for (auto& [key, s] : by_key) s.color = colors[series.size() % 6], series.push_back(s);
  return out + line_chart({.id = "chart-memory", .title = "Memory per category", .x_label = "step", .y_label = "bytes"},
                          series);
}

std::string checkpoints(const RunDir& r) {
  std::int64_t taken = 0, snapshots = 0;
  std::string steps;
  for (const StepRecord& s : r.steps) {
    if (s.checkpoint) steps += fmt::format("{}{}", taken++ ? ", " : "", s.step);
    if (s.snapshot) ++snapshots;
  }
  std::string out = "<h2>Checkpoints</h2>\n";
  out += fmt::format(
      "<p>Steps recorded with a disk checkpoint (<code>\"checkpoint\": true</code> in metrics.jsonl): "
      "<b id=\"checkpoints-taken\">{}</b>{}{}. Steps with a memory snapshot: {}.</p>\n",
      taken, taken ? " (steps " : "", taken ? steps + ")" : "", snapshots);
  if (r.checkpoints.empty())
    return out +
           "<p class=\"note\">No committed checkpoint in checkpoints/ (a manifest.json is written last, when "
           "a save commits).</p>\n";
  out += "<table><tr><th>committed checkpoint</th><th>size</th><th>layout</th><th>ranks</th></tr>\n";
  for (const CheckpointInfo& c : r.checkpoints)
    out += fmt::format(
        "<tr class=\"checkpoint\" data-step=\"{0}\"><td>step {0}</td><td>{1}B</td><td>{2}</td><td>{3}</td></tr>\n",
        c.step, fmt_si(static_cast<double>(c.bytes)), html_escape(c.layout), c.world);
  return out + "</table>\n";
}

std::string incidents(const resilience::SupervisorReport& h) {
  std::string out = "<h2>htrun: incidents and goodput</h2>\n";
  out += fmt::format(
      "<p>Verdict: <b class=\"{}\">{}</b>. Goodput <b id=\"goodput\">{:.1f}%</b> ({:.1f} s of training "
      "in {:.1f} s wall time), {} restart(s), cordoned nodes [{}].</p>\n",
      h.exit_code == 0 ? "good" : "bad", html_escape(h.verdict), 100 * h.goodput(), h.productive_s, h.wall_s,
      h.restarts, fmt::join(h.cordoned, ", "));
  if (h.incidents.empty()) return out + "<p class=\"note\">No incident.</p>\n";
  std::vector<TimelineEvent> events;
  std::string table =
      "<table><tr><th>time</th><th>kind</th><th>rank</th><th>node</th><th>detected in</th><th>recovered in</th>"
      "<th>steps lost</th><th>resumed from</th><th>message</th></tr>\n";
  for (const resilience::Incident& i : h.incidents) {
    const double recovery = i.recovery_s.value_or(-1.0);
    const std::string recovered = recovery < 0 ? std::string("-") : fmt::format("{:.1f} s", recovery);
    const std::string resumed =
        i.resume_tier.empty() ? "-" : fmt::format("step {} ({})", i.resumed_from, i.resume_tier);
    const std::string kind = resilience::incident_kind_name(i.kind);
    events.push_back({.kind = kind,
                      .label = fmt::format("rank {}: detected {:.2f} s, recovered {}, {} step(s) lost", i.rank,
                                           i.detection_latency_s, recovered, i.steps_lost),
                      .time_s = i.time_s,
                      .detection_s = i.detection_latency_s,
                      .recovery_s = recovery});
    table += fmt::format(
        "<tr class=\"incident\"><td>{:.1f} s</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2f} "
        "s</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        i.time_s, html_escape(kind), i.rank, i.node, i.detection_latency_s, recovered, i.steps_lost,
        html_escape(resumed), html_escape(i.message.substr(0, 120)));
  }
  out += timeline_chart("chart-incidents", h.wall_s, events);
  out +=
      "<p class=\"note\">Red line: the failure; orange: until htrun acted on it (detection); blue: until the "
      "first step completed after it (recovery). Times from htrun_report.json (docs/htrun.md, \"The report\").</p>\n";
  return out + table + "</table>\n";
}

}  // namespace

int mesh_world_size(const std::string& mesh) {
  static const std::regex dim(R"([a-z]+(\d+))");
  int world = 1;
  bool any = false;
  for (auto it = std::sregex_iterator(mesh.begin(), mesh.end(), dim); it != std::sregex_iterator(); ++it)
    world *= std::stoi((*it)[1].str()), any = true;
  return any ? world : 0;
}

std::string render_page(const RunDir& r, const PageOptions& o) {
  const auto mesh = r.run.fields.find("mesh");
  const auto* mesh_text = mesh == r.run.fields.end() ? nullptr : std::get_if<std::string>(&mesh->second);
  const int world = std::max(1, mesh_world_size(mesh_text ? *mesh_text : std::string()));
  const std::vector<double> mfu = mfu_series(r, o, world);
  std::string page = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ht-report: {}</title>\n<style>{}</style>"
      "</head>\n<body>\n",
      field_text(r.run.fields, "model"), kStyle);
  page += header(r, mfu.empty() ? std::nan("") : median(mfu));
  page += curves(r, mfu);
  page += mfu_note(r, o, world);
  page += memory(r);
  page += checkpoints(r);
  if (r.htrun) page += incidents(*r.htrun);
  page += "<p class=\"note\" id=\"rendered\"></p>\n";
  page += kScript;
  return page + "</body></html>\n";
}

}  // namespace ht::report
