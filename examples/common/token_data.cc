// Token data and sampling for the bundled language-model programs.
#include "examples/common/token_data.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ht/core/rng.h"
#include "ht/core/version.h"
#include "ht/parallel/gather_parameters.h"

namespace ht::examples {

namespace fs = std::filesystem;

namespace {

// What a token file is made from: every input file's path, size and
// modification time (a directory's files, in name order), and the
// validation share. Kept beside the file as <file>.inputs, so that a
// relaunch with the same --text (htrun's) reads the file instead of
// tokenising the corpus again.
std::string inputs_signature(const std::vector<std::string>& inputs, double val_fraction) {
  std::ostringstream s;
  s << "val_fraction " << val_fraction << "\n";
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    s << fs::absolute(p).string() << " " << fs::file_size(p, ec) << " "
      << fs::last_write_time(p, ec).time_since_epoch().count() << "\n";
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (!fs::is_directory(input, ec)) {
      add(input);
      continue;
    }
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(input, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) add(f);
  }
  return s.str();
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return in ? s.str() : std::string();
}

}  // namespace

void TokenDataFlags::add_to(CLI::App& app) {
  app.add_option("--data", data, "HDF5 token file (default <run-dir>/tokens.h5; created if missing)");
  app.add_option("--text", text,
                 "text files or directories to tokenise into --data (default: " + std::string(kDefaultCorpusDir) + ")");
  app.add_option("--val-fraction", val_fraction, "fraction of the text kept for validation")
      ->check(CLI::Range(0.001, 0.5));
  app.add_flag("--prepare-only", prepare_only, "write the token file and stop");
  app.add_option("--seq-len", seq_len, "tokens per sequence");
}

data::TokenSplits TokenDataFlags::load(train::Job& job, std::int64_t vocab_size, std::int64_t context) const {
  HT_CHECK(seq_len > 0 && seq_len <= context, ErrorKind::kConfig,
           "--seq-len {} must lie in [1, context={}]; raise --context or shorten --seq-len", seq_len, context);
  const std::string path = data.empty() ? (fs::path(job.options().run_dir) / "tokens.h5").string() : data;
  data::TokenSplits splits;
  job.rank0_first("preparing the token file '" + path + "'", [&] {
    if (!job.rank0()) {
      splits = data::read_token_file(path);
      return;
    }
    HT_CHECK(data.empty() || !text.empty() || fs::exists(path), ErrorKind::kIo,
             "token file '{}' (--data) does not exist; pass --text FILES to create it, or omit --data to use "
             "<run-dir>/tokens.h5 prepared from {}",
             path, kDefaultCorpusDir);
    if (!text.empty() || !fs::exists(path)) {
      const std::vector<std::string> inputs = text.empty() ? std::vector<std::string>{kDefaultCorpusDir} : text;
      const std::string signature = inputs_signature(inputs, val_fraction), recorded = path + ".inputs";
      if (fs::exists(path) && read_whole(recorded) == signature) {
        std::printf("# reusing %s: made from the same %zu text input(s)\n", path.c_str(), inputs.size());
      } else {
        std::printf("# preparing %s from %zu text input(s): %s%s\n", path.c_str(), inputs.size(),
                    inputs.front().c_str(), inputs.size() > 1 ? ", ..." : "");
        std::error_code ec;
        fs::remove(recorded, ec);  // no stale record beside a new file, should the write fail
        data::write_token_file(path, data::tokenize_bytes(inputs, val_fraction));
        std::ofstream(recorded + ".tmp") << signature;
        fs::rename(recorded + ".tmp", recorded, ec);
      }
    }
    splits = data::read_token_file(path);
  });
  if (job.rank0())
    std::printf("# %s\n# data %s: %zu train / %zu val tokens, vocab %lld, unigram entropy %.4f nats\n",
                build_description().c_str(), path.c_str(), splits.train.size(), splits.val.size(),
                (long long)splits.vocab_size, data::unigram_entropy(splits.val, splits.vocab_size));
  HT_CHECK(splits.vocab_size <= vocab_size, ErrorKind::kConfig,
           "the dataset's vocabulary ({}) is larger than the model's vocab_size ({}); raise --vocab", splits.vocab_size,
           vocab_size);
  return splits;
}

void SampleFlags::add_to(CLI::App& app) {
  app.add_option("--sample-tokens", tokens, "bytes to sample at the end (0: none)");
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)");
  app.add_option("--prompt", prompt, "text the sample starts from");
}

void SampleFlags::print(train::Engine& engine, train::Job& job,
                        const std::function<std::unique_ptr<models::CausalLM>()>& make_whole) const {
  if (tokens <= 0) return;
  const auto full = engine.full_parameters();
  if (!job.rank0()) return;
  std::unique_ptr<models::CausalLM> whole = make_whole();
  parallel::load_full_parameters(*whole, full);
  Rng rng(engine.options().seed);
  std::vector<std::int32_t> ids;
  for (unsigned char c : prompt) ids.push_back(std::int32_t(c));
  std::string text = prompt;
  for (std::int32_t t : whole->generate(ids, tokens, temperature, rng)) text.push_back(char(t));
  std::printf("# sample (temperature %.2f):\n%s\n", temperature, escape_unprintable(text).c_str());
}

std::string escape_unprintable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(ch);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

int train_language_model(const char* program, train::TrainFlags& flags, const TokenDataFlags& data,
                         const SampleFlags& sample, const models::ModelFlags& model) {
  flags.model_spec = [&] { return models::spec(model.resolve(), data.seq_len); };  // for --auto and --dry-run
  return train::run_job(program, flags, [&](train::Job& job) {
    const models::ModelConfig config = model.resolve();
    models::validate_parallel(config, flags.engine.layout.tp, flags.engine.layout.pp);
    const auto make_model = [&](const nn::Placement& at) { return models::make_model(config, at); };
    const data::TokenSplits splits = data.load(job, models::vocab_size(config), models::context(config));
    if (data.prepare_only) return;
    data::TokenBatches batches(splits, data.seq_len);
    train::Engine engine(job, flags.engine, make_model, batches);
    flags.fit.run_fields["seq_len"] = data.seq_len;
    flags.fit.at_end = [&](train::Engine& e) { sample.print(e, job, [&] { return make_model({}); }); };
    train::fit(job, engine, flags.fit);
  });
}

}  // namespace ht::examples
