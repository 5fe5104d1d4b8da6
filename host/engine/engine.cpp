#include "engine/engine.h"

#include "engine/kv_calibration.h"
#include "error.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>

namespace cellm {

namespace {
constexpr size_t max_cached_graphs = 16;
constexpr int64_t max_slots = int64_t{1} << 28;
constexpr int32_t calibration_tokens = 512;  // at most, of a coded cache's key transform (engine/kv_calibration.h)
}

Engine::Engine(const Model& model, Backend& backend, const EngineOptions& options)
    : model_(&model), backend_(&backend), options_(options) {
    if (options.context_length < 1 || options.context_length > (1 << 24)) {
        throw Error("context length must be between 1 and 16777216 tokens");
    }
    if (options.block_size < 1 || !std::has_single_bit(static_cast<uint32_t>(options.block_size))) {
        throw Error("KV block size must be a power of two");
    }
    if (options.max_sequences < 1) throw Error("the engine needs room for at least one sequence");
    const uint64_t block_bytes = KvCache::bytes_per_token(model.layers(), options.kv_type) *
                                 static_cast<uint64_t>(options.block_size);
    const int64_t blocks_per_sequence = (options.context_length + options.block_size - 1) / options.block_size;
    int64_t n_blocks = blocks_per_sequence * options.max_sequences;
    if (options.kv_memory > 0) {
        n_blocks = static_cast<int64_t>(options.kv_memory / block_bytes);
        if (n_blocks < 1) {
            throw Error("the KV memory budget of " + std::to_string(options.kv_memory) + " bytes holds no block of " +
                        std::to_string(block_bytes) + " bytes");
        }
    }
    if (n_blocks * options.block_size > max_slots && options.memory_budget == 0)
        throw Error("the KV cache would hold more than 2^28 token slots");
    const std::vector<MappedRegion> regions = model.file().regions();
    weights_ = std::make_unique<WeightStore>(backend, model.file().view(), regions);
    states_ = std::make_unique<StatePool>(backend, model.layers(), options.max_sequences);
    if (options.memory_budget > 0) n_blocks = blocks_within_budget(blocks_per_sequence, block_bytes);
    kv_ = std::make_unique<KvCache>(backend, model.layers(), static_cast<int32_t>(n_blocks), options.block_size,
                                    options.kv_type);
    if (kv_->coded()) {
        calibrate_key_transform(model, backend, *weights_, *kv_, options.block_size,
                                std::min(calibration_tokens, options_.context_length));
    }
    // Build the step graphs now, so a backend that cannot run this model says so before any prompt.
    memory_ = {weights_->device_bytes(), step_scratch(blocks_per_sequence), kv_->bytes()};
    if (options.release_window && kv_->window() > 0) {
        window_ = kv_->window();
        in_window_.assign(static_cast<size_t>(kv_->pool().n_blocks()), 0);
    }
}

bool Engine::behind_window(int32_t index, int32_t length) const {
    const int32_t slack = 4 * options_.block_size;
    return window_ > 0 && (index + 1) * options_.block_size + slack <= length - window_ + 1;
}

int32_t Engine::first_in_window(int32_t length) const {
    if (window_ == 0) return 0;
    const int32_t slack = 4 * options_.block_size;
    return std::max(0, (length - window_ + 1 - slack) / options_.block_size);
}

void Engine::drop_window(int32_t block, bool still_held) {
    if (window_ == 0) return;
    // The last holder that could read the rows is gone; those that stay are all past them.
    if (--in_window_[static_cast<size_t>(block)] == 0 && still_held) kv_->release_window_rows(block);
}

void Engine::advance_window(Sequence& s) {
    const auto n = static_cast<int32_t>(s.pages.blocks.size());
    for (; s.window_first < n && behind_window(s.window_first, s.length); ++s.window_first)
        drop_window(s.pages.blocks[static_cast<size_t>(s.window_first)], true);
}

uint64_t Engine::step_scratch(int64_t blocks_per_sequence) {
    const int32_t chunk = std::clamp(options_.max_step_tokens, 1, options_.context_length);
    const int32_t seqs = std::min(chunk, options_.max_sequences);  // each with its logits row
    const auto table = static_cast<int32_t>(std::bit_ceil(static_cast<uint64_t>(blocks_per_sequence)));
    graph_for(cellm_batch_shape{sizeof(cellm_batch_shape), chunk, seqs, seqs, table, options_.block_size, 0});
    graph_for(cellm_batch_shape{sizeof(cellm_batch_shape), 1, 1, 1, 1, options_.block_size, 0});
    return backend_->scratch_bytes();
}

int64_t Engine::blocks_within_budget(int64_t blocks_per_sequence, uint64_t block_bytes) {
    // The scratch is measured on graphs over a pool of one context, standing in for the real one (which only
    // changes where the graphs' KV leaves point).
    const auto mib = [](uint64_t bytes) { return fmt::format("{} MiB", (bytes + (1 << 19)) >> 20); };
    kv_ = std::make_unique<KvCache>(*backend_, model_->layers(), static_cast<int32_t>(blocks_per_sequence),
                                    options_.block_size, options_.kv_type);
    const uint64_t scratch = step_scratch(blocks_per_sequence);
    graphs_.clear();
    graph_order_.clear();
    kv_.reset();
    const uint64_t weights = weights_->device_bytes();
    const uint64_t budget = options_.memory_budget;
    if (weights + scratch + block_bytes > budget) {
        throw Error("a memory budget of " + mib(budget) + " does not hold this model: its weights take " + mib(weights) +
                    " and a step's scratch " + mib(scratch) + ", which leaves no room for one KV block of " +
                    std::to_string(block_bytes) + " bytes");
    }
    const int64_t n_blocks = std::min(static_cast<int64_t>((budget - weights - scratch) / block_bytes),
                                      max_slots / options_.block_size);
    const int64_t tokens = n_blocks * options_.block_size;
    const bool shrinks = tokens < options_.context_length;
    if (shrinks) options_.context_length = static_cast<int32_t>(tokens);
    spdlog::info("memory budget {}: weights {}, step scratch {}, KV pool {} ({} tokens of {} bytes){}", mib(budget),
                 mib(weights), mib(scratch), mib(static_cast<uint64_t>(n_blocks) * block_bytes), tokens,
                 block_bytes / static_cast<uint64_t>(options_.block_size), shrinks ? "; the context shrinks to that" : "");
    return n_blocks;
}

Engine::~Engine() = default;

Engine::Sequence& Engine::live_sequence(int32_t sequence) {
    if (sequence < 0 || static_cast<size_t>(sequence) >= sequences_.size() || !sequences_[static_cast<size_t>(sequence)].live) {
        throw Error("sequence " + std::to_string(sequence) + " does not exist");
    }
    return sequences_[static_cast<size_t>(sequence)];
}

const Engine::Sequence& Engine::live_sequence(int32_t sequence) const {
    return const_cast<Engine*>(this)->live_sequence(sequence);
}

int32_t Engine::create_sequence() {
    int32_t slot = -1;
    if (!states_->empty() && (slot = states_->acquire()) < 0) {
        throw Error("all " + std::to_string(states_->n_slots()) +
                    " recurrent state slots are taken (one per sequence the engine may hold at once)");
    }
    auto it = std::find_if(sequences_.begin(), sequences_.end(), [](const Sequence& s) { return !s.live; });
    if (it == sequences_.end()) it = sequences_.insert(sequences_.end(), Sequence{});
    *it = Sequence{};
    it->live = true;
    it->state_slot = slot;
    return static_cast<int32_t>(it - sequences_.begin());
}

void Engine::release_sequence(int32_t sequence) {
    Sequence& s = live_sequence(sequence);
    shrink(s, 0);
    if (s.state_slot >= 0) states_->release(s.state_slot);
    s = Sequence{};
    give_back_kv();
}

void Engine::give_back_kv() {
    // Free blocks enough for one whole context stay committed: a finished conversation keeps its prefix cache
    // for the next turn, and a new session starts without committing.
    kv_->give_back((options_.context_length + options_.block_size - 1) / options_.block_size);
}

int32_t Engine::fork_sequence(int32_t sequence) {
    live_sequence(sequence);  // the parent must exist before the child takes a slot
    const int32_t child = create_sequence();
    Sequence& c = sequences_[static_cast<size_t>(child)];
    const int32_t slot = c.state_slot;
    c = sequences_[static_cast<size_t>(sequence)];
    c.state_slot = slot;
    if (slot >= 0) states_->copy(sequences_[static_cast<size_t>(sequence)].state_slot, slot);
    for (int32_t b : c.pages.blocks) kv_->pool().retain(b);
    for (size_t i = static_cast<size_t>(c.window_first); i < c.pages.blocks.size(); ++i) hold_window(c.pages.blocks[i]);
    return child;
}

int32_t Engine::sequence_length(int32_t sequence) const { return live_sequence(sequence).length; }

std::span<const int32_t> Engine::sequence_tokens(int32_t sequence) const { return live_sequence(sequence).tokens; }

std::span<const int32_t> Engine::sequence_blocks(int32_t sequence) const { return live_sequence(sequence).pages.blocks; }

int32_t Engine::truncate(int32_t sequence, int32_t n) {
    Sequence& s = live_sequence(sequence);
    s.length = std::clamp(n, 0, s.length);
    if (s.state_slot >= 0 && s.length < static_cast<int32_t>(s.tokens.size())) {
        // The state has seen every token: it cannot go back to position n, so the sequence starts over.
        s.length = 0;
        states_->clear(s.state_slot);
    }
    if (s.length <= s.embedded_from) s.embedded_from = std::numeric_limits<int32_t>::max();
    shrink(s, s.length);
    // Taking back more tokens than the window's slack reaches blocks whose window rows are gone: the window of
    // the shorter sequence must be whole, or it starts over.
    const int32_t first = std::min(first_in_window(s.length), s.window_first);
    bool whole = true;
    for (int32_t i = first; i < s.window_first; ++i) whole = whole && !kv_->window_rows_released(s.pages.blocks[static_cast<size_t>(i)]);
    if (!whole) {
        s.length = 0;
        shrink(s, 0);
    } else {
        for (int32_t i = first; i < s.window_first; ++i) hold_window(s.pages.blocks[static_cast<size_t>(i)]);
        s.window_first = first;
    }
    give_back_kv();
    return s.length;
}

int32_t Engine::token_determined_length(int32_t sequence) const {
    const Sequence& s = live_sequence(sequence);
    return std::min(s.length, s.embedded_from);
}

int32_t Engine::reuse_prefix(int32_t sequence, std::span<const int32_t> prompt) {
    Sequence& s = live_sequence(sequence);
    if (s.length != 0) throw Error("only an empty sequence can start from the prefix cache");
    // A recurrent state after a cached prefix is not kept, so such models compute every prompt whole.
    if (!options_.prefix_cache || !states_->empty() || prompt.empty()) return 0;
    const auto bs = static_cast<size_t>(options_.block_size);
    BlockPool& pool = kv_->pool();
    // The last prompt token is always computed, so its logits exist.
    for (size_t start = 0; start + bs <= prompt.size() - 1; start += bs) {
        const BlockHash hash = hash_block(s.hashes.empty() ? kv_->hash_seed() : s.hashes.back(), prompt.data() + start,
                                          options_.block_size);
        const int32_t block = pool.acquire_cached(hash);
        if (block < 0) break;
        s.pages.blocks.push_back(block);
        s.hashes.push_back(hash);
        s.tokens.insert(s.tokens.end(), prompt.begin() + static_cast<ptrdiff_t>(start),
                        prompt.begin() + static_cast<ptrdiff_t>(start + bs));
    }
    s.length = static_cast<int32_t>(s.tokens.size());
    for (int32_t b : s.pages.blocks) hold_window(b);
    // A cached prefix whose window rows are gone where this sequence will still read them is no use.
    for (size_t i = static_cast<size_t>(first_in_window(s.length)); i < s.pages.blocks.size(); ++i) {
        if (kv_->window_rows_released(s.pages.blocks[i])) {
            s.length = 0;
            shrink(s, 0);
            return 0;
        }
    }
    advance_window(s);
    prefix_hit_tokens_ += s.length;
    prefix_hit_blocks_ += static_cast<int64_t>(s.pages.blocks.size());
    return s.length;
}

int32_t Engine::blocks_needed(int32_t sequence, int32_t n_tokens) const {
    const Sequence& s = live_sequence(sequence);
    const int32_t bs = options_.block_size;
    const int32_t have = static_cast<int32_t>(s.pages.blocks.size());
    const int32_t need = (s.length + n_tokens + bs - 1) / bs;
    const bool copy = s.length % bs != 0 && kv_->pool().references(s.pages.blocks.back()) > 1;
    return std::max(0, need - have) + (copy ? 1 : 0);
}

bool Engine::reserve(Sequence& s, int32_t n_positions) {
    BlockPool& pool = kv_->pool();
    const int32_t bs = options_.block_size;
    if (s.length % bs != 0) {
        // The next token lands in the last block, which must become this sequence's own before it changes.
        int32_t& last = s.pages.blocks.back();
        if (pool.references(last) > 1) {
            const int32_t copy = kv_->allocate();
            if (copy < 0) return false;
            kv_->copy_block(last, copy);
            drop_window(last, true);
            pool.release(last);
            last = copy;
            hold_window(copy);
            ++copied_blocks_;
        } else {
            pool.unpublish(last);
        }
    }
    const size_t needed = static_cast<size_t>((n_positions + bs - 1) / bs);
    const size_t had = s.pages.blocks.size();
    while (s.pages.blocks.size() < needed) {
        const int32_t b = kv_->allocate();
        if (b < 0) {
            while (s.pages.blocks.size() > had) {
                drop_window(s.pages.blocks.back(), false);
                pool.release(s.pages.blocks.back());
                s.pages.blocks.pop_back();
            }
            return false;
        }
        s.pages.blocks.push_back(b);
        hold_window(b);
    }
    return true;
}

void Engine::shrink(Sequence& s, int32_t n_positions) {
    const int32_t bs = options_.block_size;
    const size_t needed = static_cast<size_t>((n_positions + bs - 1) / bs);
    while (s.pages.blocks.size() > needed) {
        const int32_t b = s.pages.blocks.back();
        if (static_cast<int32_t>(s.pages.blocks.size()) > s.window_first) drop_window(b, kv_->pool().references(b) > 1);
        kv_->pool().release(b);
        s.pages.blocks.pop_back();
    }
    s.window_first = std::min(s.window_first, static_cast<int32_t>(s.pages.blocks.size()));
    s.tokens.resize(std::min(s.tokens.size(), static_cast<size_t>(n_positions)));
    s.hashes.resize(std::min(s.hashes.size(), static_cast<size_t>(n_positions / bs)));
}

void Engine::publish_full_blocks(Sequence& s) {
    if (!options_.prefix_cache || !states_->empty()) return;
    const int32_t bs = options_.block_size;
    for (auto i = static_cast<int32_t>(s.hashes.size()); i < std::min(s.length, s.embedded_from) / bs; ++i) {
        const BlockHash hash = hash_block(s.hashes.empty() ? kv_->hash_seed() : s.hashes.back(), s.tokens.data() + i * bs, bs);
        kv_->pool().publish(s.pages.blocks[static_cast<size_t>(i)], hash);
        s.hashes.push_back(hash);
    }
}

KvStats Engine::kv_stats() const {
    const BlockPool& pool = kv_->pool();
    KvStats st;
    st.blocks = pool.n_blocks();
    st.free = pool.n_free();
    st.used = st.blocks - st.free;
    st.committed = pool.n_committed();
    st.committed_bytes = kv_->committed_bytes();
    st.window_released = kv_->n_window_released();
    st.cached = pool.n_cached();
    st.prefix_hit_tokens = prefix_hit_tokens_;
    st.prefix_hit_blocks = prefix_hit_blocks_;
    st.copied_blocks = copied_blocks_;
    return st;
}

StepGraph& Engine::graph_for(const cellm_batch_shape& shape) {
    const GraphKey key{shape.n_tokens, shape.n_seqs, shape.n_outputs, shape.max_blocks, shape.n_embd_rows};
    if (auto it = graphs_.find(key); it != graphs_.end()) {
        // Least recently used goes first: keep the order of use, newest last.
        graph_order_.erase(std::find(graph_order_.begin(), graph_order_.end(), key));
        graph_order_.push_back(key);
        return *it->second;
    }
    if (graphs_.size() >= max_cached_graphs) {
        graphs_.erase(graph_order_.front());
        graph_order_.erase(graph_order_.begin());
    }
    auto graph = std::make_unique<StepGraph>(*model_, *backend_, *weights_, *kv_, *states_, shape);
    StepGraph& ref = *graph;
    graphs_.emplace(key, std::move(graph));
    graph_order_.push_back(key);
    return ref;
}

void Engine::step(std::span<const Work> work, std::vector<float>& logits) {
    if (work.empty()) throw Error("a step needs at least one sequence");
    int32_t n_tokens = 0, n_outputs = 0, max_blocks = 1;
    for (size_t i = 0; i < work.size(); ++i) {
        const Work& w = work[i];
        const Sequence& s = live_sequence(w.sequence);
        for (size_t j = 0; j < i; ++j) {
            if (work[j].sequence == w.sequence) {
                throw Error("sequence " + std::to_string(w.sequence) + " appears twice in one step");
            }
        }
        if (w.tokens.empty()) throw Error("a step item needs at least one token");
        const int32_t end = s.length + static_cast<int32_t>(w.tokens.size());
        if (end > options_.context_length) {
            throw Error("the sequence would hold " + std::to_string(end) + " tokens, more than the context length " +
                        std::to_string(options_.context_length));
        }
        for (int32_t t : w.tokens) {
            if (t < 0 || t >= n_vocab()) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
        }
        if (!w.embedded.empty() && !model_->vision()) throw Error("this model takes no embeddings in place of tokens");
        for (size_t k = 0; k < w.embedded.size(); ++k) {
            const EmbeddedRow& e = w.embedded[k];
            if (e.index < 0 || static_cast<size_t>(e.index) >= w.tokens.size() || e.values == nullptr ||
                (k > 0 && e.index <= w.embedded[k - 1].index)) {
                throw Error("embedded row " + std::to_string(e.index) + " is not a token of the step item, in order");
            }
        }
        n_tokens += static_cast<int32_t>(w.tokens.size());
        n_outputs += w.logits == LogitsWanted::All ? static_cast<int32_t>(w.tokens.size()) : w.logits == LogitsWanted::Last ? 1 : 0;
        max_blocks = std::max(max_blocks, (end + options_.block_size - 1) / options_.block_size);
    }
    if (n_outputs == 0) n_outputs = 1;  // the graph always produces logits; an unwanted row is dropped below
    // Round the table width up so a growing sequence reuses the same prepared graph for a while.
    max_blocks = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(max_blocks)));

    // Reserve KV blocks for every item first. Whatever fails from here on gives the new blocks back, so a
    // failed step leaves every sequence's tokens as they were.
    auto release_reserved = [&] {
        for (const Work& w : work) {
            Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
            shrink(s, s.length);
        }
    };
    for (const Work& w : work) {
        Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        if (!reserve(s, s.length + static_cast<int32_t>(w.tokens.size()))) {
            release_reserved();
            throw Error("the KV cache is full");
        }
    }
    try {
        run_step(work, n_tokens, n_outputs, max_blocks, logits);
    } catch (...) {
        release_reserved();
        throw;
    }
    for (const Work& w : work) {
        Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        if (!w.embedded.empty()) s.embedded_from = std::min(s.embedded_from, s.length + w.embedded.front().index);
        s.length += static_cast<int32_t>(w.tokens.size());
        s.tokens.insert(s.tokens.end(), w.tokens.begin(), w.tokens.end());
        publish_full_blocks(s);
        advance_window(s);
    }
}

void Engine::run_step(std::span<const Work> work, int32_t n_tokens, int32_t n_outputs, int32_t max_blocks,
                      std::vector<float>& logits) {
    for (auto& v : inputs_.i32) v.clear();
    inputs_.embeddings.clear();
    auto& tokens = inputs_.i32[CELLM_INPUT_TOKENS];
    auto& positions = inputs_.i32[CELLM_INPUT_POSITIONS];
    auto& token_seq = inputs_.i32[CELLM_INPUT_TOKEN_SEQ];
    auto& slots = inputs_.i32[CELLM_INPUT_SLOTS];
    auto& table = inputs_.i32[CELLM_INPUT_BLOCK_TABLE];
    auto& rows = inputs_.i32[CELLM_INPUT_OUTPUT_ROWS];
    auto& state_slots = inputs_.i32[CELLM_INPUT_STATE_SLOTS];
    auto& embedded_rows = inputs_.i32[CELLM_INPUT_EMBEDDING_ROWS];
    const auto n_embd = static_cast<size_t>(model_->info().n_embd);
    table.assign(static_cast<size_t>(max_blocks) * work.size(), -1);
    for (size_t r = 0; r < work.size(); ++r) {
        const Work& w = work[r];
        const Sequence& s = sequences_[static_cast<size_t>(w.sequence)];
        state_slots.push_back(s.state_slot);
        std::copy(s.pages.blocks.begin(), s.pages.blocks.end(), table.begin() + static_cast<ptrdiff_t>(r * static_cast<size_t>(max_blocks)));
        for (const EmbeddedRow& e : w.embedded) {
            embedded_rows.push_back(static_cast<int32_t>(tokens.size()) + e.index);
            inputs_.embeddings.insert(inputs_.embeddings.end(), e.values, e.values + n_embd);
        }
        for (size_t i = 0; i < w.tokens.size(); ++i) {
            const int32_t pos = s.length + static_cast<int32_t>(i);
            if (w.logits == LogitsWanted::All || (w.logits == LogitsWanted::Last && i + 1 == w.tokens.size())) {
                rows.push_back(static_cast<int32_t>(tokens.size()));
            }
            tokens.push_back(w.tokens[i]);
            positions.push_back(pos);
            token_seq.push_back(static_cast<int32_t>(r));
            slots.push_back(s.pages.slot(pos, options_.block_size));
        }
    }
    const bool dropped_row = rows.empty();
    if (dropped_row) rows.push_back(n_tokens - 1);

    const cellm_batch_shape shape{sizeof(cellm_batch_shape), n_tokens, static_cast<int32_t>(work.size()), n_outputs,
                                  max_blocks, options_.block_size, static_cast<int32_t>(embedded_rows.size())};
    StepGraph& graph = graph_for(shape);
    logits.resize(static_cast<size_t>(n_outputs) * static_cast<size_t>(n_vocab()));
    graph.execute(inputs_, logits.data(), logits.size());
    if (dropped_row) logits.clear();
}

}  // namespace cellm
