//! The Hermes `web-research` environment: multi-hop questions answered with the web tools
//! (`web_search`, `web_extract`), scored by an LLM judge through the run's own inference
//! server plus tool-use, efficiency and source-diversity terms.
//!
//! * Data: `--env.dataset_name` (default `google/frames-benchmark`, as upstream) split
//!   `--env.dataset_split` (default `test`): a hub dataset id read from the Hugging Face cache
//!   or downloaded into it, or a local JSONL/JSON/CSV/TSV/parquet file or directory, with rows
//!   `Prompt`/`prompt`/`question`, `Answer`/`answer` and optional `reasoning_types`. It is
//!   shuffled with `--env.seed`; the eval hold-out is `max(eval_holdout_size, n ×
//!   eval_split_ratio)`, capped so one training row remains. When the dataset cannot be had
//!   (offline and not cached, say) a warning says so and 10 built-in multi-hop questions are
//!   used, split 80/20; `--env.dataset_name none` picks them without trying.
//! * Reward = clamp₀¹(correctness · (correctness_weight + tool_usage_weight·tool_used +
//!   efficiency_weight·efficiency + diversity)): the shaping terms pay only as far as the
//!   answer is correct, so a wrong but quick answer earns 0 (`hack` checks it). Correctness is the judge's JSON
//!   `{"score": 0..1}` (temperature 0, 150 tokens), or a word-overlap heuristic when the judge
//!   fails or its answer does not parse (as with `--testing true`, whose scripted server has
//!   no judge).
//! * Web backend: `auto` — Tavily when `TAVILY_API_KEY` is set, else SearXNG at `SEARXNG_URL`, else the
//!   web tools are hidden with a warning; `--testing` and `--env.web_backend fake` use canned pages.
//!
//! ```text
//! cargo run --example web_research -- process --testing true --env.total_steps 4
//! cargo run --example web_research -- check
//! cargo run --example web_research -- evaluate --env.dataset_name frames.jsonl \
//!     --openai.base_url URL --openai.model_name M --openai.server_type openai
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use hermes_env::data;
use hermes_env::prelude::*;

/// One question with its reference answer; the aliases read FRAMES' column names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Question {
    /// The question.
    #[serde(alias = "Prompt", alias = "prompt")]
    pub question: String,
    /// The expected answer.
    #[serde(alias = "Answer", deserialize_with = "data::text")]
    pub answer: String,
    /// FRAMES reasoning types (e.g. "Numerical reasoning | Temporal reasoning"), if known.
    #[serde(default, deserialize_with = "data::text")]
    pub reasoning_types: String,
}

fn q(question: &str, answer: &str, reasoning_types: &str) -> Question {
    Question {
        question: question.into(),
        answer: answer.into(),
        reasoning_types: reasoning_types.into(),
    }
}

/// The built-in multi-hop questions used when no dataset file is given.
fn builtin_questions() -> Vec<Question> {
    vec![
        q("Which planet in our solar system has the most confirmed moons, and who led the team that announced many of them in 2023?", "Saturn; Edward Ashton led the team", "Multiple constraints"),
        q("What is the capital of the country where the Eiffel Tower's designer was born?", "Paris, France (Gustave Eiffel was born in Dijon, France)", "Multiple constraints"),
        q("How many years passed between the first Moon landing and the launch of the Hubble Space Telescope?", "21 years (1969 to 1990)", "Numerical reasoning | Temporal reasoning"),
        q("Which element, discovered by Marie Curie, is named after her home country?", "Polonium, named after Poland", "Multiple constraints"),
        q("What river flows through the city where the Beatles formed?", "The River Mersey flows through Liverpool", "Multiple constraints"),
        q("Who composed the symphony premiered in the same year the Brooklyn Bridge opened?", "Johannes Brahms premiered his Third Symphony in 1883", "Temporal reasoning"),
        q("What is the chemical symbol of the metal that the Statue of Liberty's skin is made of?", "Cu, copper", "Multiple constraints"),
        q("In which ocean is the island nation whose capital is Malé?", "The Indian Ocean (the Maldives)", "Multiple constraints"),
        q("How many sides does the shape of the building housing the US Department of Defense have?", "Five sides; the Pentagon is a pentagon", "Numerical reasoning"),
        q("Which language, other than English, is an official language of the country whose largest city is Auckland?", "Māori (te reo Māori) in New Zealand", "Multiple constraints"),
    ]
}

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "was", "were", "with", "that", "this", "from", "into", "its",
    "his", "her", "their", "has", "have", "had", "not", "but", "who", "which", "what", "when",
    "where", "how", "why", "all", "any", "can", "our", "you", "your", "they", "them", "than",
    "then", "there", "these", "those", "been", "being", "also", "about", "named", "after",
];

fn content_words(text: &str) -> BTreeSet<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2 && !STOPWORDS.contains(w))
        .map(str::to_owned)
        .collect()
}

/// `min(1, 0.4·jaccard + 0.6·recall)` over content words; 0.5 when nothing is expected.
/// Cited URLs are left out of the answer's words (upstream counted them, so citing sources,
/// which the prompt asks for, lowered the score).
fn heuristic_correctness(expected: &str, answer: &str) -> f64 {
    let expected = content_words(expected);
    if expected.is_empty() {
        return 0.5;
    }
    let without_urls: Vec<&str> = answer
        .split_whitespace()
        .filter(|w| !w.contains("://"))
        .collect();
    let answer = content_words(&without_urls.join(" "));
    let common = expected.intersection(&answer).count() as f64;
    let union = expected.union(&answer).count() as f64;
    let jaccard = if union > 0.0 { common / union } else { 0.0 };
    let recall = common / expected.len() as f64;
    (0.4 * jaccard + 0.6 * recall).min(1.0)
}

/// The judge's score: JSON `{"score": x}` (code fences stripped), else a `"score": x`
/// pattern; values outside 0..=1 are ignored.
fn parse_judge_score(text: &str) -> Option<f64> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .map(|s| s.trim_end().trim_end_matches("```"))
        .unwrap_or(trimmed)
        .trim();
    let in_range = |x: f64| (0.0..=1.0).contains(&x).then_some(x);
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(unfenced) {
        if let Some(score) = value.get("score").and_then(serde_json::Value::as_f64) {
            return in_range(score);
        }
    }
    let after = &text[text.find("\"score\"")? + "\"score\"".len()..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let number: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number.parse().ok().and_then(in_range)
}

/// Distinct domains of the http(s) URLs in `text`, lower-cased, with a leading `www.`
/// removed as a prefix (upstream's character-set strip also ate leading `w` and `.`).
fn cited_domains(text: &str) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || "()[]<>\"'".contains(c))
        .filter_map(|w| {
            w.strip_prefix("https://")
                .or_else(|| w.strip_prefix("http://"))
        })
        .filter_map(|rest| rest.split(['/', '?', '#', ':']).next())
        .map(|host| host.trim_end_matches(['.', ',', ';']).to_lowercase())
        .map(|host| host.strip_prefix("www.").map(str::to_owned).unwrap_or(host))
        .filter(|host| !host.is_empty())
        .collect()
}

const WEB_TOOLS: &[&str] = &["web_search", "web_extract", "search", "firecrawl"];

fn tool_call_names(run: &AgentResult) -> Vec<&str> {
    run.messages
        .iter()
        .filter(|m| m.role == "assistant")
        .flat_map(|m| m.tool_calls.iter().flatten())
        .map(|c| c.function.name.as_str())
        .collect()
}

/// Multi-hop research questions scored by an LLM judge plus tool-use, efficiency and
/// source-diversity terms.
#[hermes_env(
    name = "web-research",
    toolsets = ["web", "file"],
    web_backend = "auto",
    dataset_name = "google/frames-benchmark",
    dataset_split = "test",
    max_agent_turns = 15,
    group_size = 4,
    total_steps = 1000,
    steps_per_eval = 100,
    // Upstream ran web-research's evaluation at temperature 0.
    eval_temperature = 0.0,
    servers = [DefaultServer::openrouter("anthropic/claude-sonnet-4.5")],
)]
pub struct WebResearch {
    /// Weight of the judged correctness.
    #[config(default = 0.6)]
    correctness_weight: f64,
    /// Weight of having used a web tool.
    #[config(default = 0.2)]
    tool_usage_weight: f64,
    /// Weight of the efficiency term (few turns).
    #[config(default = 0.2)]
    efficiency_weight: f64,
    /// Bonus for citing URLs from at least two distinct domains.
    #[config(default = 0.1)]
    diversity_bonus: f64,
    /// Turns up to which efficiency is 1.0.
    #[config(default = 5)]
    efficient_max_calls: i64,
    /// Turns after which efficiency drops faster (0.12 instead of 0.08 per turn).
    #[config(default = 10)]
    heavy_penalty_calls: i64,
    /// Smallest eval hold-out of a dataset file (upstream `eval_size`).
    #[config(default = 20)]
    eval_holdout_size: i64,
    /// Fraction of a dataset file held out for evaluation, if larger.
    #[config(default = 0.1)]
    eval_split_ratio: f64,
    /// A local dataset file (`Prompt`, `Answer`, `reasoning_types`); when set it wins over
    /// `dataset_name`, and a file that cannot be read stops the run.
    #[config(default = "")]
    dataset_path: String,
    /// Seed of the shuffle before the train/eval split.
    #[config(default = 42)]
    seed: i64,
    train: Vec<Question>,
    eval: Vec<Question>,
    next: usize,
    /// Correctness by (prompt, answer), for the metrics (the judge runs at temperature 0).
    correctness: Mutex<HashMap<String, f64>>,
}

/// The parts of one reward.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Terms {
    tool_used: f64,
    efficiency: f64,
    diversity: f64,
}

impl WebResearch {
    fn terms(&self, run: &AgentResult) -> Terms {
        let calls = tool_call_names(run);
        let tool_used = f64::from(u8::from(calls.iter().any(|n| WEB_TOOLS.contains(n))));
        let n = if run.turns_used > 0 {
            i64::from(run.turns_used)
        } else {
            calls.len() as i64
        };
        let over = (n - self.efficient_max_calls) as f64;
        let efficiency = if n <= self.efficient_max_calls {
            1.0
        } else if n <= self.heavy_penalty_calls {
            1.0 - 0.08 * over
        } else {
            (1.0 - 0.12 * over).max(0.0)
        };
        let answer = run.final_response().unwrap_or_default();
        let diversity = if cited_domains(answer).len() >= 2 {
            self.diversity_bonus
        } else {
            0.0
        };
        Terms {
            tool_used,
            efficiency,
            diversity,
        }
    }

    fn key(&self, item: &Question, run: &AgentResult) -> String {
        format!(
            "{}\u{1f}{}",
            item.question,
            run.final_response().unwrap_or_default()
        )
    }

    fn recorded_correctness(&self, item: &Question, run: &AgentResult) -> f64 {
        let book = self.correctness.lock().expect("lock poisoned");
        book.get(&self.key(item, run)).copied().unwrap_or(0.0)
    }

    /// The questions of `dataset_path` (errors stop the run), else of `dataset_name` (errors
    /// fall back to the built-in questions with a warning), else `None`.
    async fn dataset_rows(&self) -> Result<Option<Vec<Question>>> {
        let cfg = self.env_config();
        if !self.dataset_path.is_empty() {
            let dataset = data::Dataset::open_config(
                &self.dataset_path,
                cfg.dataset_config.as_deref(),
                &cfg.dataset_split,
            )
            .await?;
            if dataset.is_empty() {
                bail!("the dataset {} has no rows", self.dataset_path);
            }
            return Ok(Some(dataset.items()?));
        }
        let fallback = "the 10 built-in questions";
        Ok(data::open_env_or_fallback(cfg, fallback).await)
    }

    async fn judge(&self, item: &Question, answer: &str, ctx: &ToolContext) -> f64 {
        if answer.trim().is_empty() {
            return 0.0;
        }
        let prompt = format!(
            "Grade a research answer against the reference answer.\n\nQuestion: {}\n\nReference \
             answer: {}\n\nCandidate answer: {answer}\n\nReply with JSON only: {{\"score\": <a \
             number from 0 to 1>, \"reason\": \"<one sentence>\"}}",
            item.question, item.answer
        );
        let messages = vec![
            Message::system("You are a strict, fair grader of factual answers."),
            Message::user(prompt),
        ];
        match ctx.judge(messages).await {
            Ok(text) => parse_judge_score(&text)
                .unwrap_or_else(|| heuristic_correctness(&item.answer, answer)),
            Err(e) => {
                // Not the model's fault: reported, and scored by the heuristic.
                eprintln!("web-research: judge failed ({e}); using the heuristic score");
                heuristic_correctness(&item.answer, answer)
            }
        }
    }
}

#[hermes_env::hooks]
impl WebResearch {
    async fn setup(&mut self) -> Result<()> {
        let (mut rows, n_eval) = match self.dataset_rows().await? {
            Some(rows) => {
                let min = self.eval_holdout_size.max(0) as usize;
                let n_eval = data::eval_size(rows.len(), min, self.eval_split_ratio);
                (rows, n_eval)
            }
            None => {
                let rows = builtin_questions();
                let n_eval = rows.len() / 5;
                (rows, n_eval)
            }
        };
        data::shuffle(&mut rows, self.seed as u64);
        (self.train, self.eval) = data::split_eval(rows, n_eval);
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<Question> {
        let item = self.train.get(self.next % self.train.len().max(1)).cloned();
        self.next += 1;
        item
    }

    fn format_prompt(&self, item: &Question) -> String {
        format!(
            "Research the following question using web_search and web_extract. Consult at least \
             two different sources, then answer in 2-4 sentences and cite the URLs you used.\n\n\
             Question: {}",
            item.question
        )
    }

    async fn compute_reward(
        &self,
        item: &Question,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let answer = run.final_response().unwrap_or_default();
        let correctness = self.judge(item, answer, ctx).await;
        {
            let mut book = self.correctness.lock().expect("lock poisoned");
            if book.len() >= 4096 {
                book.clear();
            }
            book.insert(self.key(item, run), correctness);
        }
        let t = self.terms(run);
        // The shaping terms scale with correctness: a wrong answer earns nothing for being
        // quick or for citing sources (otherwise "reply at once" alone pays the efficiency
        // term, which `hack` reports).
        let reward = correctness
            * (self.correctness_weight
                + self.tool_usage_weight * t.tool_used
                + self.efficiency_weight * t.efficiency
                + t.diversity);
        Ok(reward.clamp(0.0, 1.0))
    }

    fn eval_items(&self) -> Vec<Question> {
        self.eval.clone()
    }

    fn evaluate(&self, samples: &[EvalSample<Question>], metrics: &mut Metrics) {
        let n = samples.len().max(1) as f64;
        let correctness: f64 = samples
            .iter()
            .map(|s| self.recorded_correctness(&s.item, &s.run))
            .sum();
        let calls: usize = samples.iter().map(|s| tool_call_names(&s.run).len()).sum();
        let used = samples
            .iter()
            .filter(|s| self.terms(&s.run).tool_used > 0.0)
            .count();
        metrics.insert("eval/mean_correctness".into(), correctness / n);
        metrics.insert("eval/mean_tool_calls".into(), calls as f64 / n);
        metrics.insert("eval/tool_usage_rate".into(), used as f64 / n);
        metrics.insert("eval/n_items".into(), samples.len() as f64);
    }

    fn wandb_log(&self, rollouts: &[ScoredRollout<Question>], metrics: &mut Metrics) {
        let n = rollouts.len().max(1) as f64;
        let correctness: Vec<f64> = rollouts
            .iter()
            .map(|r| self.recorded_correctness(&r.item, &r.run))
            .collect();
        let terms: Vec<Terms> = rollouts.iter().map(|r| self.terms(&r.run)).collect();
        let mean = |f: &dyn Fn(&Terms) -> f64| terms.iter().map(f).sum::<f64>() / n;
        metrics.insert(
            "train/mean_reward".into(),
            rollouts.iter().map(|r| r.reward).sum::<f64>() / n,
        );
        metrics.insert(
            "train/mean_correctness".into(),
            correctness.iter().sum::<f64>() / n,
        );
        metrics.insert("train/mean_tool_usage".into(), mean(&|t| t.tool_used));
        metrics.insert("train/mean_efficiency".into(), mean(&|t| t.efficiency));
        metrics.insert("train/mean_diversity".into(), mean(&|t| t.diversity));
        metrics.insert("train/total_rollouts".into(), rollouts.len() as f64);
        metrics.insert(
            "train/correct_rate".into(),
            correctness.iter().filter(|&&c| c >= 0.7).count() as f64 / n,
        );
        metrics.insert(
            "train/tool_usage_rate".into(),
            terms.iter().filter(|t| t.tool_used > 0.0).count() as f64 / n,
        );
    }

    fn reference_solution(&self, item: &Question) -> Option<ReferenceSolution> {
        let sources = [
            "https://www.wikipedia.org/wiki/Research",
            "https://britannica.com/topic/research",
        ];
        Some(
            ReferenceSolution::new()
                .tool("web_search", json!({"query": item.question}))
                .tool("web_extract", json!({"urls": sources}))
                .answer(format!("{} ({} {})", item.answer, sources[0], sources[1])),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_answers_are_parsed_leniently() {
        assert_eq!(
            parse_judge_score(r#"{"score": 0.8, "reason": "ok"}"#),
            Some(0.8)
        );
        assert_eq!(
            parse_judge_score("```json\n{\"score\": 1, \"reason\": \"x\"}\n```"),
            Some(1.0)
        );
        assert_eq!(
            parse_judge_score(r#"Sure! "score": 0.25 overall"#),
            Some(0.25)
        );
        assert_eq!(parse_judge_score(r#"{"score": 7}"#), None);
        assert_eq!(parse_judge_score("no idea"), None);
    }

    #[test]
    fn heuristic_uses_recall_and_jaccard() {
        assert_eq!(heuristic_correctness("", "anything"), 0.5);
        assert_eq!(
            heuristic_correctness("Polonium Poland", "polonium, poland"),
            1.0
        );
        assert_eq!(heuristic_correctness("Polonium Poland", "radium"), 0.0);
        assert_eq!(
            heuristic_correctness("Polonium Poland", "Polonium, Poland (https://a.org/x)"),
            1.0
        );
        let half = heuristic_correctness("Polonium Poland", "Polonium");
        assert!((half - (0.4 * 0.5 + 0.6 * 0.5)).abs() < 1e-9, "{half}");
    }

    #[test]
    fn domains_strip_only_a_www_prefix() {
        let d = cited_domains(
            "See https://www.wired.com/a and http://web.dev/b, (https://WIRED.com/c).",
        );
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            ["web.dev", "wired.com"],
            "upstream's lstrip('www.') would have turned web.dev into eb.dev"
        );
    }

    #[test]
    fn frames_rows_deserialize_through_the_aliases() {
        let row = json!({"Unnamed: 0": 3, "Prompt": "Q?", "Answer": 1990, "reasoning_types": "Numerical reasoning"});
        let rows = vec![row.as_object().unwrap().clone()];
        let items: Vec<Question> = data::Dataset::from_rows(rows, "frames").items().unwrap();
        assert_eq!(
            (
                items[0].question.as_str(),
                items[0].answer.as_str(),
                items[0].reasoning_types.as_str()
            ),
            ("Q?", "1990", "Numerical reasoning")
        );
    }
}
