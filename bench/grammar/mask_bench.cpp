// Token masks over a real vocabulary, on the shared jsonschemabench cases (MaskBench's method): compile each
// schema for the model's tokenizer, then replay each instance token by token, timing the mask computed before
// every token on one thread. It also checks what it replays: every token of a valid instance must be in the
// mask and end-of-generation allowed after it; an invalid instance must meet a token outside the mask or no
// end-of-generation. --check makes any miss an exit status of 1 (a ctest, on a subset of the files).
//
//   grammar_mask_bench --model FILE.gguf [--schemas DIR] [--every N] [--shard K/N] [--times FILE]
//                      [--plugins DIR] [--schema-seconds S] [--generation] [--check] [--verbose]
// A --model without a folder is looked up in $CELLM_MODELS, else ~/.cache/cellm/models. A file with the model's
// tokenizer alone will do (scripts/gpu/gguf_tool.py vocab). --shard K/N replays the schemas whose index is K
// modulo N, so that N one-thread processes share the set; --schema-seconds S stops a schema's replay at the
// first instance that starts after S seconds (counted, and its masks so far kept); --times appends each measurement as a line
// ("compile MS" or "mask US"), for figures over several shards (bench/grammar/mask_table.py). Schemas are read
// as JSON Schema reads them (the instances follow that); --generation reads them as generation does
// (json_schema.h, JsonSchemaOptions), where valid instances with undeclared properties or long numbers then miss.
#include "../../tests/grammar/schema_cases.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

using namespace cellm;
using namespace cellm::grammar;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point start) { return std::chrono::duration<double, std::micro>(Clock::now() - start).count(); }

struct Summary {
    std::vector<double> values;
    void add(double v) { values.push_back(v); }
    double quantile(double q) {
        if (values.empty()) return 0;
        std::sort(values.begin(), values.end());
        return values[std::min(values.size() - 1, static_cast<size_t>(q * static_cast<double>(values.size())))];
    }
    double mean() const {
        double sum = 0;
        for (double v : values) sum += v;
        return values.empty() ? 0 : sum / static_cast<double>(values.size());
    }
};

bool allowed(const std::vector<uint64_t>& mask, int32_t t) { return mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1; }

}  // namespace

int main(int argc, char** argv) {
    std::string model, schemas = CELLM_JSONSCHEMABENCH_DIR;
    std::string times_path, plugins = CELLM_PLUGIN_DIR;
    double schema_seconds = 0;
    size_t every = 1, shard = 0, shards = 1;
    bool check = false, verbose = false, generation = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--model" && i + 1 < argc) {
            model = argv[++i];
        } else if (arg == "--schemas" && i + 1 < argc) {
            schemas = argv[++i];
        } else if (arg == "--every" && i + 1 < argc) {
            every = std::stoul(argv[++i]);
        } else if (arg == "--shard" && i + 1 < argc &&
                   std::sscanf(argv[i + 1], "%zu/%zu", &shard, &shards) == 2 && shard < shards) {
            ++i;
        } else if (arg == "--schema-seconds" && i + 1 < argc) {
            schema_seconds = std::stod(argv[++i]);
        } else if (arg == "--times" && i + 1 < argc) {
            times_path = argv[++i];
        } else if (arg == "--plugins" && i + 1 < argc) {
            plugins = argv[++i];
        } else if (arg == "--generation") {
            generation = true;
        } else if (arg == "--check") {
            check = true;
        } else if (arg == "--verbose") {
            verbose = true;
        } else {
            std::fprintf(stderr, "usage: grammar_mask_bench --model FILE [--schemas DIR] [--every N] [--shard K/N] [--times FILE] "
                         "[--plugins DIR] [--schema-seconds S] [--generation] [--check] [--verbose]\n");
            return 2;
        }
    }
    // A bare file name is looked up where scripts/fetch_models.sh puts models.
    if (model.find('/') == std::string::npos) {
        const char* dir = std::getenv("CELLM_MODELS");
        const char* home = std::getenv("HOME");
        model = (dir ? std::filesystem::path(dir) : std::filesystem::path(home ? home : "") / ".cache/cellm/models") / model;
    }
    if (!std::filesystem::is_regular_file(model)) {
        std::fprintf(stderr, "grammar_mask_bench: model not found: %s (scripts/fetch_models.sh)\n", model.c_str());
        return 77;
    }
    if (!std::filesystem::is_directory(schemas)) {
        std::fprintf(stderr, "grammar_mask_bench: no schema folder %s\n", schemas.c_str());
        return 77;
    }
    PluginRegistry registry;
    registry.discover({plugins});
    const auto file = ModelFile::open(registry, model);
    const auto tokenizer = Tokenizer::from_model(file->view());
    auto start = Clock::now();
    const auto vocabulary = std::make_shared<const TokenVocabulary>(*tokenizer);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they come, into a file too
    std::printf("%s: %d tokens, trie of %zu nodes built in %.1f ms\n", std::filesystem::path(model).filename().c_str(),
                vocabulary->n_vocab(), vocabulary->trie().size(), us_since(start) / 1000);

    const auto cases = test::load_schema_cases(schemas, every);
    std::FILE* times = nullptr;
    if (!times_path.empty() && (times = std::fopen(times_path.c_str(), "a")) == nullptr) {
        std::fprintf(stderr, "grammar_mask_bench: cannot write %s\n", times_path.c_str());
        return 2;
    }
    Summary compile_ms, mask_us, accept_us;
    size_t index = 0, over_limit = 0;
    size_t compiled = 0, refused = 0, valid = 0, valid_ok = 0, invalid = 0, invalid_ok = 0;
    std::vector<uint64_t> mask(vocabulary->mask_words());
    for (const auto& c : cases) {
        if (index++ % shards != shard) continue;
        std::shared_ptr<const CompiledGrammar> grammar;
        start = Clock::now();
        try {
            grammar = std::make_shared<const CompiledGrammar>(
                Grammar::from_json_schema(c.schema.dump(), {.validation = !generation}), vocabulary);
        } catch (const GrammarError&) {
            ++refused;
            continue;
        }
        compile_ms.add(us_since(start) / 1000);
        ++compiled;
        if (times) std::fprintf(times, "compile %.3f %s\n", compile_ms.values.back(), c.name.c_str());
        if (verbose) {
            std::printf("%s: compiled in %.1f ms, %zu positions, %zu uncertain, %zu KiB\n", c.name.c_str(),
                        compile_ms.values.back(), grammar->n_positions(), grammar->n_uncertain(), grammar->bytes() / 1024);
        }
        const auto replay_start = Clock::now();
        for (const auto& instance : c.instances) {
            if (schema_seconds > 0 && us_since(replay_start) > schema_seconds * 1e6) {
                ++over_limit;
                std::printf("%s: replay stopped after %.0f s (--schema-seconds)\n", c.name.c_str(), schema_seconds);
                break;
            }
            GrammarMatcher matcher(grammar);
            bool fits = true;
            for (int32_t t : tokenizer->encode(instance.text, false, false)) {
                start = Clock::now();
                matcher.fill_mask(mask);
                const double us = us_since(start);
                if (instance.valid) {
                    mask_us.add(us);
                    if (times) std::fprintf(times, "mask %.3f\n", us);
                }
                if (!allowed(mask, t)) {
                    fits = false;
                    break;
                }
                start = Clock::now();
                if (!matcher.accept_token(t)) {
                    std::printf("%s: token %d is in the mask but the matcher refuses it\n", c.name.c_str(), t);
                    return 1;
                }
                accept_us.add(us_since(start));
            }
            if (fits) {
                matcher.fill_mask(mask);
                fits = allowed(mask, tokenizer->eos()) || (tokenizer->eot() >= 0 && allowed(mask, tokenizer->eot()));
            }
            (instance.valid ? valid : invalid) += 1;
            (instance.valid ? valid_ok : invalid_ok) += fits == instance.valid;
            if (fits != instance.valid) {
                std::printf("MISS %s: %s instance %s: %.200s\n", c.name.c_str(), instance.valid ? "valid" : "invalid",
                            instance.valid ? "does not fit the masks" : "fits the masks", instance.text.c_str());
            }
        }
        if (times) std::fflush(times);  // a run cut short still leaves its whole schemas
    }
    if (times) std::fclose(times);
    std::printf("schemas: %zu compiled, %zu refused; valid instances through the masks %zu/%zu, invalid stopped %zu/%zu\n",
                compiled, refused, valid_ok, valid, invalid_ok, invalid);
    if (over_limit > 0) std::printf("schemas whose replay was stopped at --schema-seconds: %zu\n", over_limit);
    std::printf("compile ms: mean %.1f p50 %.1f p99 %.1f max %.1f\n", compile_ms.mean(), compile_ms.quantile(0.5),
                compile_ms.quantile(0.99), compile_ms.quantile(1));
    std::printf("mask us (%zu masks): mean %.1f p50 %.1f p99 %.1f max %.1f\n", mask_us.values.size(), mask_us.mean(),
                mask_us.quantile(0.5), mask_us.quantile(0.99), mask_us.quantile(1));
    std::printf("accept us: mean %.1f p99 %.1f\n", accept_us.mean(), accept_us.quantile(0.99));
    return check && (valid_ok != valid || invalid_ok != invalid) ? 1 : 0;
}
