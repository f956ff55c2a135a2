// tokenizer_bench: how fast a tokenizer encodes real text, on one thread.
// Reads the text files named (data::list_text_files: a directory's files,
// recursively, sorted, skipping links, hidden names and *.dat), then encodes all of it
// --rounds times: round 1 with the tokenizer just loaded (its word cache
// empty), later rounds with the cache warm. One line a round; MB = 10^6 bytes.
// With --threads 1,2,...: then the parallel path of `ht-data shards`
// (data::encode_corpus: each file a document, one pool of threads, results
// in document order), for each thread count a tokenizer just loaded (cold)
// and the same again (warm), with the speed-up over the first count and the
// process's CPU time (CPU / wall: the cores it actually had); --repeat N
// shows the fastest of N runs of each.
//
//   tokenizer_bench --tokenizer DIR_OF_ENCODER_JSON /usr/share/games/fortunes /usr/share/common-licenses
//   tokenizer_bench --tokenizer DIR_OF_ENCODER_JSON --rounds 1 --threads 1,2 --repeat 5
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ht/core/version.h"
#include "ht/data/text_corpus.h"
#include "ht/data/tokenizer.h"

namespace {
namespace fs = std::filesystem;

void append_file(const fs::path& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  text += ss.str();
}

std::string read_inputs(const std::vector<std::string>& inputs) {
  std::string text;
  for (const std::string& file : ht::data::list_text_files(inputs)) append_file(file, text);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"How fast a tokenizer encodes text (one thread)", "tokenizer_bench"};
  std::string tokenizer_path;
  std::vector<std::string> inputs{"/usr/share/games/fortunes", "/usr/share/common-licenses"};
  int rounds = 3;
  std::vector<int> threads;
  int repeat = 1;
  app.add_option("--tokenizer", tokenizer_path, "what ht::data::load_tokenizer takes")->required();
  app.add_option("--rounds", rounds, "encodes of the whole text; the first with an empty cache")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "thread counts for the parallel path, e.g. 1,2 (default: none)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "runs of each thread count; the fastest is shown (a shared machine is noisy)")
      ->check(CLI::PositiveNumber);
  app.add_option("inputs", inputs, "text files or directories (default: the fortunes and the licences)");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::string text = read_inputs(inputs);
    const auto tokenizer = ht::data::load_tokenizer(tokenizer_path);
    std::printf("# tokenizer_bench: %s, %s\n", ht::build_description().c_str(),
                tokenizer->description().c_str());
    std::printf("# %zu bytes of text from %zu input(s), one thread\n", text.size(), inputs.size());
    for (int r = 1; r <= rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<std::int32_t> ids = tokenizer->encode(text);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double mb = double(text.size()) / 1e6;
      std::printf("round %d | %.2f MB | %.3f s | %.2f MB/s | %zu tokens | %.2f bytes/token | cache %s\n", r, mb, s,
                  mb / s, ids.size(), double(text.size()) / double(ids.size()), r == 1 ? "cold" : "warm");
    }
    if (!threads.empty()) {
      const ht::data::TextCorpus corpus = ht::data::TextCorpus::open(inputs);
      const double mb = double(corpus.bytes()) / 1e6;
      std::printf("# parallel path (data::encode_corpus): %lld documents, %.2f MB, best of %d\n",
                  static_cast<long long>(corpus.documents()), mb, repeat);
      double base[2] = {0, 0};
      for (const int t : threads) {
        struct Best {
          double s = 1e30, cpu = 0;
          std::size_t tokens = 0;
        } best[2];
        for (int rep = 0; rep < repeat; ++rep) {
          const auto fresh = ht::data::load_tokenizer(tokenizer_path);
          for (int warm = 0; warm < 2; ++warm) {
            std::size_t tokens = 0;
            const auto t0 = std::chrono::steady_clock::now();
            const std::clock_t c0 = std::clock();
            ht::data::encode_corpus(corpus, *fresh, {.threads = t, .end_of_text = fresh->end_of_text()},
                                    [&](ht::data::EncodedPiece&& p) { tokens += p.tokens.size(); });
            const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s < best[warm].s) best[warm] = {s, cpu, tokens};
          }
        }
        for (int warm = 0; warm < 2; ++warm) {
          const Best& b = best[warm];
          const double rate = mb / b.s;
          if (base[warm] == 0) base[warm] = rate;
          std::printf("threads %d | %.2f MB | %.3f s | cpu %.3f s | %.2f MB/s | %zu tokens | x%.2f over %d thread(s) | "
                      "cache %s\n",
                      t, mb, b.s, b.cpu, rate, b.tokens, rate / base[warm], threads.front(), warm ? "warm" : "cold");
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
