// cellm-host perplexity: a model's perplexity over a text, computed as llama.cpp's llama-perplexity computes it
// (tools/perplexity/perplexity.cpp), so that the two compare: the whole text tokenized once (BOS as the model
// asks), cut into chunks of the context length, each chunk's first token replaced by BOS when the model adds one,
// each chunk a fresh sequence whose second half is scored (positions n_ctx/2 .. n_ctx-2 predicting the token after
// them). --save-logits F keeps those positions' log-probabilities in llama.cpp's logits file format, and
// --kl-divergence F compares a run with such a file: another KV type, backend, precision or quantization, or
// llama.cpp itself (llama-perplexity --kl-divergence-base F). A client of libcellm: cellm_engine_evaluate gives the
// logits.
#include "commands.h"
#include "logits_file.h"
#include "perplexity_math.h"
#include "sdk_engine.h"

#include "error.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

namespace cellm::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    ManifestOverrides flags;
    std::string file, save_logits, kl_divergence;
    std::optional<int32_t> chunks;
};

// The file's bytes less one trailing newline, as llama.cpp's -f reads a prompt file.
std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read " + path + ": " + std::strerror(errno));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error("cannot read " + path);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

std::vector<int32_t> tokenize(cellm_engine* engine, const std::string& text, bool add_special) {
    size_t n = 0;
    check(cellm_engine_tokenize(engine, text.c_str(), add_special ? 1 : 0, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    check(cellm_engine_tokenize(engine, text.c_str(), add_special ? 1 : 0, ids.data(), ids.size(), &n));
    return ids;
}

// What one chunk's scored positions do with their logits: add to the perplexity, and write or compare compact rows.
struct Scorer {
    const int32_t* next = nullptr;  // the token after each position of the chunk
    int32_t first = 0, last = 0;    // the scored positions, [first, last)
    PerplexityStats ppl;
    LogitsWriter* writer = nullptr;
    LogitsReader* base = nullptr;
    KlStats kl;
    std::vector<uint16_t> row;
    std::string error;  // the first failure; the callback cannot throw through the C library

    void score(int32_t position, std::span<const float> logits) {
        if (position < first || position >= last || !error.empty()) return;
        const int32_t token = next[position];
        try {
            if (writer != nullptr) {
                ppl.add(encode_compact(logits, token, row));
                writer->write_row(row);
            } else if (base != nullptr) {
                base->read_row(row);
                kl.add(logits, row, token);
            } else {
                ppl.add(token_nll(logits, token));
            }
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
};

void on_logits(int32_t position, const float* logits, int32_t n_vocab, void* user_data) {
    static_cast<Scorer*>(user_data)->score(position, {logits, static_cast<size_t>(n_vocab)});
}

void print_kl_chunk(int32_t chunk, const KlStats& kl) {
    const Estimate log_ppl = kl.log_ppl(), ratio = kl.log_ppl_ratio(), kld = kl.kl_divergence();
    const Estimate rms = kl.p_diff_rms(), top = kl.same_top_p();
    const double ppl = std::exp(log_ppl.value);
    std::printf("%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf", chunk, ppl,
                ppl * log_ppl.uncertainty, ratio.value, ratio.uncertainty, kld.value, kld.uncertainty);
    std::printf("    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n", 100.0 * rms.value, 100.0 * rms.uncertainty,
                100.0 * top.value, 100.0 * top.uncertainty);
}

// llama-perplexity --kl-divergence's closing statistics, line for line.
void print_kl_summary(const KlStats& kl) {
    std::vector<float> kld = kl.kld, p_diff = kl.p_diff;
    std::sort(kld.begin(), kld.end());
    std::sort(p_diff.begin(), p_diff.end());
    const auto median = [](const std::vector<float>& v) {
        return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
    };

    std::printf("====== Perplexity statistics ======\n");
    const Estimate log_ppl = kl.log_ppl(), log_base = kl.log_ppl_base(), ratio = kl.log_ppl_ratio();
    const double ppl = std::exp(log_ppl.value), ppl_unc = ppl * log_ppl.uncertainty;
    const double base = std::exp(log_base.value), base_unc = base * log_base.uncertainty;
    const double cov = kl.log_ppl_covariance();
    std::printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_unc);
    std::printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", base, base_unc);
    std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n",
                100.0 * cov / (log_ppl.uncertainty * log_base.uncertainty));
    std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio.value, ratio.uncertainty);
    const double ppl_ratio = std::exp(ratio.value);
    std::printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", ppl_ratio, ppl_ratio * ratio.uncertainty);
    const double diff_var = ppl_unc * ppl_unc + base_unc * base_unc - 2.0 * ppl * base * cov;
    std::printf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl - base, std::sqrt(std::max(diff_var, 0.0)));
    std::printf("\n");

    std::printf("====== KL divergence statistics ======\n");
    const Estimate mean = kl.kl_divergence();
    std::printf("Mean    KLD: %10.6lf ± %10.6lf\n", mean.value, mean.uncertainty);
    std::printf("Maximum KLD: %10.6f\n", static_cast<double>(kld.back()));
    for (const float f : {0.999f, 0.990f, 0.950f, 0.900f}) {
        std::printf("%4.1f%%   KLD: %10.6f\n", 100.0 * f, static_cast<double>(percentile(kld, f)));
    }
    std::printf("Median  KLD: %10.6f\n", static_cast<double>(median(kld)));
    for (const float f : {0.100f, 0.050f, 0.010f, 0.001f}) {
        std::printf("%4.1f%%   KLD: %10.6f\n", 100.0 * f, static_cast<double>(percentile(kld, f)));
    }
    std::printf("Minimum KLD: %10.6f\n", static_cast<double>(kld.front()));
    std::printf("\n");

    std::printf("====== Token probability statistics ======\n");
    const Estimate p = mean_and_uncertainty(kl.sum_p_diff, kl.sum_p_diff2, kl.count);
    std::printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * p.value, 100.0 * p.uncertainty);
    std::printf("Maximum Δp: %6.3lf%%\n", 100.0 * p_diff.back());
    for (const float f : {0.999f, 0.990f, 0.950f, 0.900f, 0.750f}) {
        std::printf("%4.1f%%   Δp: %6.3lf%%\n", 100.0 * f, 100.0 * percentile(p_diff, f));
    }
    std::printf("Median  Δp: %6.3lf%%\n", 100.0 * median(p_diff));
    for (const float f : {0.250f, 0.100f, 0.050f, 0.010f, 0.001f}) {
        std::printf("%4.1f%%   Δp: %6.3lf%%\n", 100.0 * f, 100.0 * percentile(p_diff, f));
    }
    std::printf("Minimum Δp: %6.3lf%%\n", 100.0 * p_diff.front());
    const Estimate rms = kl.p_diff_rms(), top = kl.same_top_p();
    std::printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms.value, 100.0 * rms.uncertainty);
    std::printf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top.value, 100.0 * top.uncertainty);
}

int run(const Options& o) {
    ManifestOverrides flags = o.flags;
    // A comparison takes its context and chunks from the base file, read (and checked) before the model loads.
    std::unique_ptr<LogitsReader> base;
    if (!o.kl_divergence.empty()) {
        base = std::make_unique<LogitsReader>(o.kl_divergence);
        const LogitsHeader& h = base->header();
        if (flags.context && *flags.context != h.n_ctx) {
            throw Error(o.kl_divergence + " was computed with a context of " + std::to_string(h.n_ctx) +
                        "; --context " + std::to_string(*flags.context) + " differs");
        }
        if (o.chunks && *o.chunks > h.n_chunk) {
            throw Error(o.kl_divergence + " holds " + std::to_string(h.n_chunk) + " chunks; --chunks " +
                        std::to_string(*o.chunks) + " asks for more");
        }
        flags.context = h.n_ctx;
    }
    const std::string text = read_text(o.file);

    const EnginePtr engine = open_engine(flags, 1);
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    check(cellm_engine_get_info(engine.get(), &info));
    const int32_t n_ctx = info.context_length;
    if (flags.context && *flags.context != n_ctx) {
        throw Error("the engine runs a context of " + std::to_string(n_ctx) + " tokens, not the " +
                    std::to_string(*flags.context) + " asked for (a memory budget too small for it?)");
    }
    const int32_t n_vocab = info.n_vocab;
    // The model's BOS, when it adds one: the whole of what an empty text tokenizes to.
    const std::vector<int32_t> bos = tokenize(engine.get(), "", true);
    const auto tokenize_start = Clock::now();
    const std::vector<int32_t> tokens = tokenize(engine.get(), text, true);
    const double tokenize_s = std::chrono::duration<double>(Clock::now() - tokenize_start).count();
    if (tokens.size() < 2 * static_cast<size_t>(n_ctx)) {
        throw Error(o.file + " tokenizes to only " + std::to_string(tokens.size()) + " tokens; a context of " +
                    std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx));
    }
    const auto n_chunk_max = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
    int32_t n_chunk = o.chunks ? std::min(*o.chunks, n_chunk_max) : n_chunk_max;
    if (base) {
        const LogitsHeader& h = base->header();
        if (h.n_vocab != n_vocab) {
            throw Error(o.kl_divergence + " was computed with a vocabulary of " + std::to_string(h.n_vocab) +
                        " tokens, this model has " + std::to_string(n_vocab) + ": another model");
        }
        n_chunk = o.chunks ? *o.chunks : h.n_chunk;
        const size_t n = static_cast<size_t>(n_chunk) * static_cast<size_t>(n_ctx);
        const auto end = tokens.begin() + static_cast<std::ptrdiff_t>(std::min(n, tokens.size()));
        const auto differ = std::mismatch(tokens.begin(), end, h.tokens.begin()).first;
        const auto at = static_cast<size_t>(differ - tokens.begin());
        if (at < n) {
            throw Error(o.kl_divergence + " holds other tokens than " + o.file + " gives this model (token " +
                        std::to_string(at) + ": " + std::to_string(h.tokens[at]) + " there, " +
                        (at < tokens.size() ? std::to_string(tokens[at]) : std::string("none")) +
                        " here): another text or tokenizer");
        }
    }

    const int32_t first = n_ctx / 2;
    std::fprintf(stderr, "perplexity: %s on %s; %s: %zu tokens (%.2f s to tokenize), %d chunks of %d, scoring %d "
                         "positions of each%s\n",
                 info.model_name, info.backend, o.file.c_str(), tokens.size(), tokenize_s, n_chunk, n_ctx,
                 scored_per_chunk(n_ctx), bos.empty() ? "" : ", BOS first");

    std::unique_ptr<LogitsWriter> writer;
    if (!o.save_logits.empty()) {
        const auto end = tokens.begin() + static_cast<std::ptrdiff_t>(n_chunk) * n_ctx;
        const LogitsHeader header{n_ctx, n_vocab, n_chunk, std::vector<int32_t>(tokens.begin(), end)};
        writer = std::make_unique<LogitsWriter>(o.save_logits, header);
    }

    Scorer scorer;
    scorer.first = first;
    scorer.last = n_ctx - 1;
    scorer.writer = writer.get();
    scorer.base = base.get();
    scorer.row.resize(compact_row_size(n_vocab));
    std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
    for (int32_t i = 0; i < n_chunk; ++i) {
        const auto start = tokens.begin() + static_cast<std::ptrdiff_t>(i) * n_ctx;
        std::copy(start, start + n_ctx, chunk.begin());
        if (!bos.empty()) chunk[0] = bos[0];
        scorer.next = &*start + 1;
        const auto pass_start = Clock::now();
        check(cellm_engine_evaluate(engine.get(), chunk.data(), chunk.size(), first, on_logits, &scorer));
        if (!scorer.error.empty()) throw Error(scorer.error);
        if (i == 0) {
            const double pass_s = std::chrono::duration<double>(Clock::now() - pass_start).count();
            std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", pass_s,
                         pass_s * n_chunk / 60.0);
            if (base) {
                std::printf("\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
                            "              Δp RMS            Same top p\n");
            }
        }
        if (base) {
            print_kl_chunk(i + 1, scorer.kl);
        } else {
            std::printf("[%d]%.4lf,", i + 1, scorer.ppl.ppl());
        }
        std::fflush(stdout);
    }
    std::printf("\n");
    if (writer) writer->finish();
    if (base) {
        print_kl_summary(scorer.kl);
    } else {
        std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", scorer.ppl.ppl(), scorer.ppl.uncertainty());
    }
    return 0;
}

}  // namespace

Command add_perplexity(CLI::App& app) {
    auto o = std::make_shared<Options>();
    o->flags.add_to(app);
    app.add_option("--file", o->file, "The text to score")->required();
    app.add_option("--chunks", o->chunks, "Score at most this many chunks of the context length (default: all)")
        ->check(CLI::PositiveNumber);
    auto* save = app.add_option("--save-logits", o->save_logits,
                                "Also write the scored positions' log-probabilities to this file (llama.cpp's logits "
                                "file, as llama-perplexity --kl-divergence-base writes it)");
    app.add_option("--kl-divergence", o->kl_divergence,
                   "Compare with a logits file written by --save-logits or llama-perplexity --kl-divergence-base: KL "
                   "divergence, top-token agreement and perplexity against it")
        ->excludes(save);
    return [o]() { return run(*o); };
}

}  // namespace cellm::cli
