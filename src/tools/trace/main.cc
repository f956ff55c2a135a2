// ht-trace: merges the ranks' timelines that --trace FILE wrote
// (FILE.rank<R>.json, Chrome trace-event JSON) into one file that Perfetto
// (ui.perfetto.dev, or its trace_processor) and chrome://tracing open: one
// process per rank, one row per engine phase, computation and communicator.
// Prints per rank where the time went and how much of each communicator's
// work ran during a backward (the overlap data parallelism counts on).
//
//   ht-trace FILE -o merged.json            FILE: the --trace path (or the ranks' files)
//   ht-trace FILE -o merged.json --html t.html   also the timeline as one HTML page (inline SVG)
//
// Exit status: 0 merged (missing ranks are named on stderr), 2 unreadable or
// inconsistent input (the message says which file and why).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "core/files.h"
#include "ht/core/error.h"
#include "trace/merge.h"
#include "trace/timeline_html.h"

int main(int argc, char** argv) {
  CLI::App app{"Merge the ranks' trace files of a hypertrain run (--trace) into one", "ht-trace"};
  std::vector<std::string> inputs;
  std::string output;
  std::string html;
  bool quiet = false;
  app.add_option("inputs", inputs, "the --trace path (standing for FILE.rank<R>.json beside it), or rank files")
      ->required();
  app.add_option("-o,--output", output, "the merged file (Chrome trace-event JSON)")->required();
  app.add_option("--html", html, "also write the timeline as a self-contained HTML page (inline SVG)");
  app.add_flag("-q,--quiet", quiet, "no summary");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::vector<ht::trace_tool::RankTrace> ranks = ht::trace_tool::read_rank_traces(inputs);
    std::vector<std::string> warnings;
    const nlohmann::json merged = ht::trace_tool::merge_traces(ranks, warnings);
    for (const std::string& w : warnings) std::fprintf(stderr, "ht-trace: warning: %s\n", w.c_str());
    ht::detail::write_file_replacing(output, merged.dump() + "\n", /*sync=*/false, "merged trace");
    if (!html.empty())
      ht::detail::write_file_replacing(html, ht::trace_tool::timeline_html(merged), /*sync=*/false, "timeline page");
    std::printf("ht-trace: %zu rank(s), %zu events, steps %lld-%lld -> %s\n", ranks.size(),
                merged["traceEvents"].size(), (long long)ranks.front().steps[0], (long long)ranks.front().steps[1],
                output.c_str());
    if (!quiet) std::fputs(ht::trace_tool::summarise(ranks).c_str(), stdout);
    return 0;
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-trace: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-trace: %s\n", e.what());
  }
  return 2;
}
