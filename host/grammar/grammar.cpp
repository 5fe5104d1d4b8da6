#include "grammar/grammar.h"

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

#include <algorithm>
#include <map>

namespace cellm::grammar {

namespace {

constexpr uint32_t kSurrogateFirst = 0xD800, kSurrogateLast = 0xDFFF;
// How far rules and classes are copied into the alternatives that use them (inline_small_rules).
constexpr size_t kMaxSpelledAlternatives = 16;
constexpr size_t kMaxInlinedAlternatives = 8;
constexpr size_t kMaxInlinedItems = 8;
constexpr size_t kMaxInlineTarget = 4;  // items of an alternative that rules are copied into
constexpr size_t kMaxReturnSites = 64;

uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

// The UTF-8 encodings of code points first..last (same encoded length, aligned by split below): per byte
// position, the range of byte values.
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t out[4]) {
    const int n = encoded_length(cp);
    if (n == 1) {
        out[0] = static_cast<uint8_t>(cp);
        return;
    }
    static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
        out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

// Splits first..last into pieces whose encodings are products of byte ranges (the way RE2 compiles UTF-8
// classes), so each piece is one sequence of byte sets.
void split_utf8(uint32_t first, uint32_t last, std::vector<ByteRanges>& out) {
    static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
    for (uint32_t end : kLengthEnds) {
        if (first <= end && last > end) {
            split_utf8(first, end, out);
            split_utf8(end + 1, last, out);
            return;
        }
    }
    const int n = encoded_length(first);
    for (int i = 1; i < n; ++i) {
        const uint32_t mask = (1u << (6 * i)) - 1;
        if ((first & ~mask) != (last & ~mask)) {
            if ((first & mask) != 0) {
                split_utf8(first, first | mask, out);
                split_utf8((first | mask) + 1, last, out);
                return;
            }
            if ((last & mask) != mask) {
                split_utf8(first, (last & ~mask) - 1, out);
                split_utf8(last & ~mask, last, out);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode(first, a);
    encode(last, b);
    ByteRanges ranges;
    for (int i = 0; i < n; ++i) ranges.emplace_back(a[i], b[i]);
    out.push_back(std::move(ranges));
}

// Which nodes of a directed graph lie on a cycle (a self-loop included): Tarjan's strongly connected components,
// iteratively, since a grammar's chains of rules can be thousands deep.
std::vector<bool> on_cycle(const std::vector<std::vector<uint32_t>>& edges) {
    const size_t n = edges.size();
    std::vector<bool> cyclic(n, false);
    std::vector<int64_t> index(n, -1), low(n, 0);
    std::vector<bool> on_stack(n, false);
    std::vector<uint32_t> stack;
    int64_t next_index = 0;
    struct Frame {
        uint32_t node;
        size_t at = 0;
    };
    for (uint32_t start = 0; start < n; ++start) {
        if (index[start] >= 0) continue;
        std::vector<Frame> frames{{start}};
        index[start] = low[start] = next_index++;
        stack.push_back(start);
        on_stack[start] = true;
        while (!frames.empty()) {
            Frame& f = frames.back();
            if (f.at < edges[f.node].size()) {
                const uint32_t w = edges[f.node][f.at++];
                if (w == f.node) cyclic[w] = true;
                if (index[w] < 0) {
                    index[w] = low[w] = next_index++;
                    stack.push_back(w);
                    on_stack[w] = true;
                    frames.push_back({w});
                } else if (on_stack[w]) {
                    low[f.node] = std::min(low[f.node], index[w]);
                }
                continue;
            }
            const uint32_t v = f.node;
            frames.pop_back();
            if (!frames.empty()) low[frames.back().node] = std::min(low[frames.back().node], low[v]);
            if (low[v] != index[v]) continue;
            std::vector<uint32_t> component;
            uint32_t w;
            do {
                w = stack.back();
                stack.pop_back();
                on_stack[w] = false;
                component.push_back(w);
            } while (w != v);
            if (component.size() > 1) {
                for (uint32_t c : component) cyclic[c] = true;
            }
        }
    }
    return cyclic;
}

// Small rules that cannot reach themselves are copied into the alternatives that use them (as XGrammar inlines
// rules): a JSON string's `char` inside its `char*` loop then needs no frame, so a token of many characters
// stays within one frame, decided by the token-mask cache rather than by the real stack at run time.
RuleSet inline_small_rules(const RuleSet& in) {
    const size_t n = in.rules.size();
    // Rules on a cycle: a rule inlined into itself would never end.
    std::vector<std::vector<uint32_t>> refs(n);
    for (uint32_t r = 0; r < n; ++r) {
        for (const auto& alt : in.rules[r].alternatives) {
            for (const RuleItem& item : alt) {
                if (item.kind == RuleItem::Rule) refs[r].push_back(item.rule);
            }
        }
    }
    const std::vector<bool> cyclic = on_cycle(refs);
    std::vector<bool> small(n, false);
    for (size_t r = 0; r < n; ++r) {
        const auto& alts = in.rules[r].alternatives;
        small[r] = r != in.root && !cyclic[r] && alts.size() <= kMaxInlinedAlternatives &&
                   std::all_of(alts.begin(), alts.end(), [](const auto& a) { return a.size() <= kMaxInlinedItems; });
    }
    RuleSet out = in;
    for (auto& rule : out.rules) {
        if (rule.counted) continue;
        std::vector<std::vector<RuleItem>> result;
        for (const auto& alternative : rule.alternatives) {
            // Only into short alternatives (a loop's `x loop`): copying into a long sequence multiplies all of it.
            if (alternative.size() > kMaxInlineTarget) {
                result.push_back(alternative);
                continue;
            }
            // Expands references to small rules left to right, as long as the copies stay few; what the cap
            // stops stays a reference.
            std::vector<std::vector<RuleItem>> seqs(1);
            std::vector<RuleItem> todo(alternative.rbegin(), alternative.rend());
            while (!todo.empty()) {
                const RuleItem item = todo.back();
                todo.pop_back();
                const bool expand = item.kind == RuleItem::Rule && small[item.rule] &&
                                    seqs.size() * in.rules[item.rule].alternatives.size() <= kMaxSpelledAlternatives;
                if (!expand) {
                    for (auto& seq : seqs) seq.push_back(item);
                    continue;
                }
                const auto& alts = in.rules[item.rule].alternatives;
                if (alts.size() == 1) {
                    // One alternative: splice it in and keep expanding inside it.
                    todo.insert(todo.end(), alts[0].rbegin(), alts[0].rend());
                    continue;
                }
                std::vector<std::vector<RuleItem>> next;
                for (const auto& seq : seqs) {
                    for (const auto& alt : alts) {
                        next.push_back(seq);
                        next.back().insert(next.back().end(), alt.begin(), alt.end());
                    }
                }
                seqs = std::move(next);
            }
            for (auto& seq : seqs) result.push_back(std::move(seq));
        }
        rule.alternatives = std::move(result);
    }
    return out;
}

class Lowering {
public:
    explicit Lowering(const RuleSet& rules) : rules_(rules) {}

    void run(std::vector<Grammar::Element>& elements, std::vector<std::bitset<256>>& byte_sets,
             std::vector<std::vector<uint32_t>>& alternatives, std::vector<std::string>& names) {
        // Rules keep their ids; multi-byte character classes that cannot be spelled in place become rules
        // appended after them.
        const RuleSet inlined = inline_small_rules(rules_);
        rule_alternatives_.resize(inlined.rules.size());
        for (size_t r = 0; r < inlined.rules.size(); ++r) {
            names_.push_back(inlined.rules[r].name);
            for (const auto& alternative : inlined.rules[r].alternatives) {
                // A class's UTF-8 spellings become alternatives of this rule where that stays small: a frame of
                // its own would end after every character, and each end is a point where the token masks must
                // ask the real stack.
                std::vector<std::vector<Grammar::Element>> seqs(1);
                for (const RuleItem& item : alternative) {
                    std::vector<std::vector<Grammar::Element>> pieces = lower_item(item);
                    if (pieces.size() > 1 && (alternative.size() > kMaxInlineTarget ||
                                              seqs.size() * pieces.size() > kMaxSpelledAlternatives)) {
                        pieces = {{{Grammar::Element::Rule, class_rule(pieces)}}};
                    }
                    std::vector<std::vector<Grammar::Element>> next;
                    for (const auto& seq : seqs) {
                        for (const auto& piece : pieces) {
                            next.push_back(seq);
                            next.back().insert(next.back().end(), piece.begin(), piece.end());
                        }
                    }
                    seqs = std::move(next);
                }
                for (auto& seq : seqs) rule_alternatives_[r].push_back(std::move(seq));
            }
        }
        for (size_t r = 0; r < rule_alternatives_.size(); ++r) {
            alternatives.emplace_back();
            for (auto& seq : rule_alternatives_[r]) {
                alternatives.back().push_back(static_cast<uint32_t>(elements.size()));
                elements.insert(elements.end(), seq.begin(), seq.end());
                elements.push_back({Grammar::Element::End, static_cast<uint32_t>(r)});
                if (elements.size() > kMaxElements) {
                    throw GrammarError("the grammar is too large (over " + std::to_string(kMaxElements) +
                                       " elements once its character classes are spelled in UTF-8)");
                }
            }
        }
        byte_sets = std::move(byte_sets_);
        names = std::move(names_);
    }

private:
    uint32_t byte_set(const std::bitset<256>& set) {
        const auto [it, added] = byte_set_ids_.emplace(set.to_string(), static_cast<uint32_t>(byte_sets_.size()));
        if (added) byte_sets_.push_back(set);
        return it->second;
    }

    // An item's spellings as element sequences: one for a rule reference or an ASCII class, one per UTF-8
    // byte-range product (merged where only their first byte differs) for a class with other characters.
    std::vector<std::vector<Grammar::Element>> lower_item(const RuleItem& item) {
        if (item.kind == RuleItem::Rule) return {{{Grammar::Element::Rule, item.rule}}};
        // Surrogates are not characters: UTF-8 never encodes them.
        std::vector<CharRange> ranges;
        for (CharRange r : item.chars) {
            if (r.first < kSurrogateFirst && r.last >= kSurrogateFirst) ranges.push_back({r.first, kSurrogateFirst - 1});
            if (r.last > kSurrogateLast && r.first <= kSurrogateLast) ranges.push_back({kSurrogateLast + 1, r.last});
            if (r.last < kSurrogateFirst || r.first > kSurrogateLast) ranges.push_back(r);
        }
        if (ranges.empty()) throw GrammarError("a character class matches only surrogates, which UTF-8 cannot hold");
        std::vector<ByteRanges> products;
        for (CharRange r : ranges) split_utf8(r.first, r.last, products);
        std::map<ByteRanges, std::bitset<256>> by_tail;
        for (const ByteRanges& p : products) {
            auto& lead = by_tail[ByteRanges(p.begin() + 1, p.end())];
            for (uint32_t b = p[0].first; b <= p[0].second; ++b) lead.set(b);
        }
        std::vector<std::vector<Grammar::Element>> pieces;
        for (const auto& [tail, lead] : by_tail) {
            std::vector<Grammar::Element> seq{{Grammar::Element::Bytes, byte_set(lead)}};
            for (const auto& [lo, hi] : tail) {
                std::bitset<256> set;
                for (uint32_t b = lo; b <= hi; ++b) set.set(b);
                seq.push_back({Grammar::Element::Bytes, byte_set(set)});
            }
            pieces.push_back(std::move(seq));
        }
        return pieces;
    }

    // A class's spellings as a rule of their own, one per use: a rule called from one place returns there even
    // when the token masks do not know the stack, so a token running past the character stays decided.
    uint32_t class_rule(const std::vector<std::vector<Grammar::Element>>& pieces) {
        const auto id = static_cast<uint32_t>(rule_alternatives_.size());
        rule_alternatives_.push_back(pieces);
        names_.push_back("[class " + std::to_string(id) + "]");
        return id;
    }

    const RuleSet& rules_;
    std::vector<std::vector<std::vector<Grammar::Element>>> rule_alternatives_;
    std::vector<std::string> names_;
    std::vector<std::bitset<256>> byte_sets_;
    std::unordered_map<std::string, uint32_t> byte_set_ids_;
};



}  // namespace

Grammar Grammar::lower(const RuleSet& rules) {
    if (rules.rules.empty() || rules.root >= rules.rules.size()) throw GrammarError("the grammar has no root rule");
    Grammar g;
    Lowering(rules).run(g.elements_, g.byte_sets_, g.alternatives_, g.names_);
    g.root_ = rules.root;
    const size_t n = g.alternatives_.size();

    // Which rules match the empty string (to a fixed point).
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (uint32_t e : g.alternatives_[r]) {
                while (g.elements_[e].kind == Element::Rule && nullable[g.elements_[e].value]) ++e;
                if (g.elements_[e].kind == Element::End) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }

    // Left recursion: rule A reaching itself before matching a byte. Through references in tail position
    // the stack does not grow (the recognizer returns straight to the caller's caller) and the recognizer's
    // visited set ends the loop; through any other reference every turn pushes a frame, without end.
    std::vector<std::vector<uint32_t>> leftmost(n);
    std::vector<std::pair<uint32_t, uint32_t>> growing;  // (rule, leftmost rule) through a non-tail reference
    for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t e : g.alternatives_[r]) {
            for (; g.elements_[e].kind == Element::Rule; ++e) {
                leftmost[r].push_back(g.elements_[e].value);
                if (g.elements_[e + 1].kind != Element::End) growing.emplace_back(r, g.elements_[e].value);
                if (!nullable[g.elements_[e].value]) break;
            }
        }
    }
    {
        // A growing edge on a cycle of the leftmost graph: both ends in one strongly connected component. Each
        // component is told apart by the nodes that reach each other; on_cycle marks them, and an edge between
        // two marked nodes lies on a cycle when its head reaches its tail, checked only for growing edges.
        const std::vector<bool> cyclic = on_cycle(leftmost);
        std::vector<uint32_t> mark(n, UINT32_MAX);
        for (size_t k = 0; k < growing.size(); ++k) {
            const auto [r, first] = growing[k];
            if (!cyclic[r] || !cyclic[first]) continue;
            std::vector<uint32_t> todo{first};
            while (!todo.empty()) {
                const uint32_t at = todo.back();
                todo.pop_back();
                if (at == r) throw GrammarError("rule '" + g.names_[r] + "' is left-recursive");
                if (mark[at] == k || !cyclic[at]) continue;
                mark[at] = static_cast<uint32_t>(k);
                for (uint32_t next : leftmost[at]) todo.push_back(next);
            }
        }
    }

    // Return sites: the element after each non-tail reference, and through tail references the caller's own
    // (a worklist to a fixed point). A rule past kMaxReturnSites keeps a partial list and is marked: the token
    // masks then check only what may follow it, never walk its callers.
    std::vector<std::vector<uint32_t>> sites(n);
    sites[g.root_].push_back(StackForest::kBottom);
    std::vector<std::vector<uint32_t>> tail_callees(n);  // caller -> rules it calls in tail position
    std::vector<std::vector<uint32_t>> direct_sites(n);
    for (size_t e = 0; e < g.elements_.size(); ++e) {
        if (g.elements_[e].kind != Element::Rule) continue;
        const uint32_t callee = g.elements_[e].value;
        if (g.elements_[e + 1].kind == Element::End) {
            tail_callees[g.elements_[e + 1].value].push_back(callee);
        } else {
            direct_sites[callee].push_back(static_cast<uint32_t>(e + 1));
        }
    }
    g.many_sites_.assign(n, false);
    auto add_site = [&](uint32_t r, uint32_t site) {
        if (g.many_sites_[r] || std::find(sites[r].begin(), sites[r].end(), site) != sites[r].end()) return false;
        if (sites[r].size() >= kMaxReturnSites) {
            g.many_sites_[r] = true;
            return true;
        }
        sites[r].push_back(site);
        return true;
    };
    std::vector<uint32_t> work;
    for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t site : direct_sites[r]) add_site(r, site);
        work.push_back(r);
    }
    while (!work.empty()) {
        const uint32_t caller = work.back();
        work.pop_back();
        for (uint32_t callee : tail_callees[caller]) {
            bool changed = false;
            if (g.many_sites_[caller] && !g.many_sites_[callee]) {
                g.many_sites_[callee] = changed = true;
            }
            for (uint32_t site : sites[caller]) changed = add_site(callee, site) || changed;
            if (changed) work.push_back(callee);
        }
    }
    g.return_sites_ = std::move(sites);

    // FIRST of each rule, then FOLLOW through the return sites (to fixed points). A sequence's FIRST runs until
    // an item that cannot be empty; if none, the sequence can end, and what follows its rule follows it too.
    std::vector<std::bitset<256>> first(n);
    auto first_of = [&](uint32_t e, std::bitset<256>& out) {
        for (;; ++e) {
            const Element& el = g.elements_[e];
            if (el.kind == Element::End) return true;
            if (el.kind == Element::Bytes) {
                out |= g.byte_sets_[el.value];
                return false;
            }
            out |= first[el.value];
            if (!nullable[el.value]) return false;
        }
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            std::bitset<256> f = first[r];
            for (uint32_t alt : g.alternatives_[r]) first_of(alt, f);
            if (f != first[r]) {
                first[r] = f;
                changed = true;
            }
        }
    }
    std::vector<uint32_t> rule_of(g.elements_.size());
    for (size_t e = g.elements_.size(); e-- > 0;) {
        rule_of[e] = g.elements_[e].kind == Element::End ? g.elements_[e].value : rule_of[e + 1];
    }
    // FOLLOW(r) takes FIRST after each direct site, FOLLOW of the site's rule where the rest can be empty, and
    // FOLLOW of every tail caller: a worklist over those inclusions.
    g.follow_.assign(n, {});
    std::vector<std::vector<uint32_t>> feeds(n);  // d -> rules whose FOLLOW includes FOLLOW(d)
    for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t site : direct_sites[r]) {
            if (first_of(site, g.follow_[r])) feeds[rule_of[site]].push_back(r);
        }
        for (uint32_t callee : tail_callees[r]) feeds[r].push_back(callee);
    }
    work.clear();
    for (uint32_t r = 0; r < n; ++r) work.push_back(r);
    while (!work.empty()) {
        const uint32_t d = work.back();
        work.pop_back();
        for (uint32_t r : feeds[d]) {
            const std::bitset<256> before = g.follow_[r];
            g.follow_[r] |= g.follow_[d];
            if (g.follow_[r] != before) work.push_back(r);
        }
    }
    return g;
}

Grammar Grammar::from_gbnf(std::string_view text) { return lower(parse_gbnf(text)); }

Grammar Grammar::from_json_schema(std::string_view schema, const JsonSchemaOptions& options) {
    if (schema.size() > kMaxGrammarBytes) {
        throw GrammarError("the JSON schema is " + std::to_string(schema.size()) + " bytes; the limit is " +
                           std::to_string(kMaxGrammarBytes));
    }
    // The grammar spells out what the schema only names (formats, bounds), so it may be a few times larger; the
    // element limit still bounds it.
    return lower(parse_gbnf(json_schema_to_gbnf(schema, options), 16 * kMaxGrammarBytes));
}

StackForest::StackForest(const Grammar& grammar) : grammar_(&grammar) {
    for (uint32_t id : {kBottom, kUnknown, kGuess}) {
        nodes_.push_back({UINT32_MAX, id});
        guessed_.push_back(id == kGuess);
    }
}

uint32_t StackForest::intern(uint32_t element, uint32_t parent) {
    const auto [it, added] = ids_.emplace(key(element, parent), static_cast<uint32_t>(nodes_.size()));
    if (added) {
        nodes_.push_back({element, parent});
        guessed_.push_back(guessed_[parent]);
    }
    return it->second;
}

const StackForest::Settled& StackForest::settle(uint32_t element, uint32_t parent) {
    const uint64_t k = key(element, parent);
    const auto found = settled_.find(k);
    if (found != settled_.end()) return found->second;
    Settled out;
    std::vector<uint64_t> visited;
    settle_into(element, parent, out, visited);
    std::sort(out.tops.begin(), out.tops.end());
    out.tops.erase(std::unique(out.tops.begin(), out.tops.end()), out.tops.end());
    return settled_.emplace(k, std::move(out)).first->second;
}

void StackForest::settle_into(uint32_t element, uint32_t parent, Settled& out, std::vector<uint64_t>& visited) {
    const uint64_t k = key(element, parent);
    if (std::find(visited.begin(), visited.end(), k) != visited.end()) return;
    visited.push_back(k);
    const Grammar::Element& e = grammar_->elements()[element];
    switch (e.kind) {
        case Grammar::Element::Bytes:
            out.tops.push_back(intern(element, parent));
            return;
        case Grammar::Element::Rule: {
            // A reference in tail position returns straight to this frame's caller.
            const uint32_t next = element + 1;
            const uint32_t callee_parent =
                grammar_->elements()[next].kind == Grammar::Element::End ? parent : intern(next, parent);
            for (uint32_t alt : grammar_->alternatives(e.value)) settle_into(alt, callee_parent, out, visited);
            return;
        }
        case Grammar::Element::End: {
            if (parent == kBottom) {
                out.reaches_bottom = true;
            } else if (parent == kUnknown || parent == kGuess) {
                const auto& sites = grammar_->return_sites(e.value);
                if (sites.size() == 1 && sites[0] != kBottom) {
                    settle_into(sites[0], parent, out, visited);
                } else if (parent == kGuess) {
                    out.reaches_guess = true;
                } else if (sites.size() == 1) {
                    out.reaches_bottom = true;  // only the root's caller: the input ends here
                } else if (std::find(out.escaped.begin(), out.escaped.end(), e.value) == out.escaped.end()) {
                    out.escaped.push_back(e.value);
                }
            } else {
                settle_into(nodes_[parent].element, nodes_[parent].parent, out, visited);
            }
            return;
        }
    }
}

bool StackForest::advance(std::span<const uint32_t> tops, uint8_t byte, std::vector<uint32_t>& next) {
    next.clear();
    bool bottom = false;
    for (uint32_t t : tops) {
        const Node n = nodes_[t];
        if (!grammar_->byte_sets()[grammar_->elements()[n.element].value].test(byte)) continue;
        const Settled& s = settle(n.element + 1, n.parent);
        next.insert(next.end(), s.tops.begin(), s.tops.end());
        bottom = bottom || s.reaches_bottom;
    }
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    return bottom;
}

bool StackForest::start(std::vector<uint32_t>& tops) {
    tops.clear();
    bool bottom = false;
    for (uint32_t alt : grammar_->alternatives(grammar_->root())) {
        const Settled& s = settle(alt, kBottom);
        tops.insert(tops.end(), s.tops.begin(), s.tops.end());
        bottom = bottom || s.reaches_bottom;
    }
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    return bottom;
}

Recognizer::Recognizer(const Grammar& grammar) : forest_(grammar) { accepting_ = forest_.start(tops_); }

bool Recognizer::can_feed(std::string_view bytes) {
    std::vector<uint32_t> tops = tops_, next;
    for (char c : bytes) {
        const bool accepting = forest_.advance(tops, static_cast<uint8_t>(c), next);
        if (next.empty() && !accepting) return false;
        tops.swap(next);
    }
    return true;
}

bool Recognizer::feed(std::string_view bytes) {
    std::vector<uint32_t> tops = tops_, next;
    bool accepting = accepting_;
    for (char c : bytes) {
        accepting = forest_.advance(tops, static_cast<uint8_t>(c), next);
        if (next.empty() && !accepting) return false;
        tops.swap(next);
    }
    tops_ = std::move(tops);
    accepting_ = accepting;
    return true;
}

}  // namespace cellm::grammar
