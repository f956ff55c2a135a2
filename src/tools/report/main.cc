// ht-report: a run directory as one self-contained HTML page (loss and
// validation curves, throughput, MFU, loss scale, skipped steps, memory,
// checkpoints, and htrun's incidents and goodput), viewable offline.
//
//   ht-report RUN_DIR                  writes RUN_DIR/report.html
//   ht-report RUN_DIR -o FILE --peak-tflops 989
//
// Exit status: 0 when the page was written, 2 when the run directory cannot be
// read (the message says which file and what to run).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "core/files.h"
#include "ht/core/error.h"
#include "report/page.h"
#include "report/run_dir.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a run directory's report as one self-contained HTML page", "ht-report"};
  std::string run_dir, output;
  ht::report::PageOptions options;
  app.add_option("run_dir", run_dir, "the run directory (--run-dir of the training program or htrun)")->required();
  app.add_option("-o,--output", output, "the HTML file to write (default RUN_DIR/report.html)");
  app.add_option("--peak-tflops", options.peak_tflops,
                 "one rank's peak dense TFLOP/s at the run's precision; adds MFU (left out without it)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (output.empty()) output = (std::filesystem::path(run_dir) / "report.html").string();

  try {
    const ht::report::RunDir run = ht::report::read_run_dir(run_dir);
    const std::string page = ht::report::render_page(run, options);
    ht::detail::write_file_replacing(output, page, /*sync=*/false, "report page");  // never half a page
    std::printf("ht-report: wrote %s (%zu steps, %zu evals, %zu checkpoints%s)\n", output.c_str(), run.steps.size(),
                run.evals.size(), run.checkpoints.size(),
                run.htrun ? (", " + std::to_string(run.htrun->incidents.size()) +
                             " htrun incidents")
                                .c_str()
                          : "");
    return 0;
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-report: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-report: %s\n", e.what());
  }
  return 2;
}
