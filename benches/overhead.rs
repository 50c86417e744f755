//! Framework overhead benchmark: 4-turn tool-calling rollouts (3 tool turns + an answer)
//! against the in-process scripted server with zero model latency, at concurrency 1, 16 and
//! 128 (one of the tool calls is a `terminal` command). Prints rollouts/s, CPU time per rollout
//! and per LLM turn (own, children = the tools' shells and commands, and total), and resident
//! memory, next to a baseline measured in the same run: the same number of bare HTTP chat
//! calls with reqwest. Then child CPU per local `terminal` command, persistent shell against
//! one fresh shell per command.
//!
//! Run: `cargo bench --bench overhead` (add `-- --quick` for a short run;
//! `HERMES_OVERHEAD_FILE_TOOLS=1` for the first release's shell-free workload).
//! `-- --live` runs thousands of live rollouts instead (see [`live`]; `--levels 256,1024,4096`,
//! `--think-ms 1000`).

#[path = "overhead/live.rs"]
mod live;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hermes_env::prelude::*;
use hermes_env::testing::{Reply, ScriptedServer};
use hermes_env::tools::ToolRegistry;
use hermes_runtime::llm::{LlmClient, RetryPolicy, Split};
use hermes_runtime::modes::{run_rollout, Runtime};
use hermes_runtime::sandbox::LocalProvider;
use serde_json::Value;

/// LLM turns per rollout.
const TURNS: usize = 4;

#[derive(Debug, Clone, Serialize)]
struct Item {
    id: usize,
}

/// A minimal environment whose reward reads back the file the agent wrote.
#[hermes_env(name = "overhead-bench", toolsets = ["file", "terminal"], max_agent_turns = 8, main = false)]
struct Bench {
    next: usize,
}

#[hermes_env::hooks]
impl Bench {
    async fn get_next_item(&mut self) -> Option<Item> {
        self.next += 1;
        Some(Item { id: self.next })
    }

    fn format_prompt(&self, item: &Item) -> String {
        format!("Task {}: write, read and rewrite notes.txt", item.id)
    }

    async fn compute_reward(
        &self,
        _item: &Item,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(if ctx.read_file("notes.txt").await? == "second" {
            1.0
        } else {
            0.0
        })
    }
}

/// Answers by turn index: write, read, rewrite, then a final answer. The read is a `terminal`
/// command, or with `HERMES_OVERHEAD_FILE_TOOLS=1` a `read_file` call (the first release's
/// workload, which started no shell: for before/after figures against it).
fn policy(request: &Value) -> Reply {
    let turn = request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    match turn {
        0 => Reply::tool(
            "write_file",
            json!({"path": "notes.txt", "content": "first"}),
        ),
        1 if file_tools_only() => Reply::tool("read_file", json!({"path": "notes.txt"})),
        1 => Reply::tool("terminal", json!({"command": "cat notes.txt"})),
        2 => Reply::tool(
            "write_file",
            json!({"path": "notes.txt", "content": "second"}),
        ),
        _ => Reply::text("done"),
    }
}

/// `HERMES_OVERHEAD_FILE_TOOLS=1`: the rollouts use file tools only (see [`policy`]).
fn file_tools_only() -> bool {
    static ONLY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONLY.get_or_init(|| std::env::var("HERMES_OVERHEAD_FILE_TOOLS").is_ok_and(|v| v == "1"))
}

/// User + system time of this process (`RUSAGE_SELF`) or of its reaped children
/// (`RUSAGE_CHILDREN`: the tools' shells and the commands they ran).
fn cpu_time_of(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut u);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn cpu_time() -> Duration {
    cpu_time_of(libc::RUSAGE_SELF)
}

fn child_cpu_time() -> Duration {
    cpu_time_of(libc::RUSAGE_CHILDREN)
}

fn rss_mb() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

struct Measure {
    wall: Duration,
    cpu: Duration,
    children: Duration,
}

async fn measure<F: std::future::Future<Output = ()>>(f: F) -> Measure {
    let (w, c, k) = (Instant::now(), cpu_time(), child_cpu_time());
    f.await;
    Measure {
        wall: w.elapsed(),
        cpu: cpu_time() - c,
        children: child_cpu_time() - k,
    }
}

/// Child CPU per `terminal` command through the persistent shell against one fresh shell per
/// command (`exec_one_shot`, the previous design), same commands, same run.
async fn child_cpu_per_command(commands: usize) -> anyhow::Result<()> {
    use hermes_runtime::sandbox::{ExecRequest, SandboxProvider, SandboxSpec};
    let provider = LocalProvider::new()?;
    let request = || {
        ExecRequest::new(
            "cat /etc/hostname >/dev/null; cd .",
            Duration::from_secs(30),
        )
    };
    let mut per_command = Vec::new();
    for one_shot in [false, true] {
        let sandbox = provider
            .create("child-cpu", &SandboxSpec::default())
            .await?;
        let run = measure(async {
            for _ in 0..commands {
                let out = if one_shot {
                    sandbox.exec_one_shot(request()).await
                } else {
                    sandbox.exec(request()).await
                };
                assert_eq!(out.expect("exec").exit_code, 0);
            }
            sandbox.teardown().await.expect("teardown");
        })
        .await;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / commands as f64;
        per_command.push((ms(run.cpu), ms(run.children), ms(run.wall)));
    }
    let [(p_self, p_child, p_wall), (o_self, o_child, o_wall)] = per_command[..] else {
        unreachable!("two variants")
    };
    println!("\nlocal terminal command ({commands} commands): ms per command");
    println!(
        "{:>26} {:>10} {:>10} {:>10}",
        "", "own cpu", "child cpu", "wall"
    );
    println!(
        "{:>26} {p_self:>10.3} {p_child:>10.3} {p_wall:>10.3}",
        "persistent shell"
    );
    println!(
        "{:>26} {o_self:>10.3} {o_child:>10.3} {o_wall:>10.3}",
        "one shell per command"
    );
    println!(
        "ratio one-shot / persistent: child cpu {:.1}x, own+child cpu {:.1}x, wall {:.1}x",
        o_child / p_child.max(1e-9),
        (o_self + o_child) / (p_self + p_child).max(1e-9),
        o_wall / p_wall.max(1e-9)
    );
    Ok(())
}

/// What confinement (Landlock and a cgroup per sandbox) costs a local sandbox's life, against
/// the same life unconfined, same run: create, a one-shot command, two commands through the
/// persistent shell, the leftover scan before verification, teardown.
async fn confinement_cost(sandboxes: usize) -> anyhow::Result<()> {
    use hermes_runtime::sandbox::{ExecRequest, LeftoverRules, SandboxProvider, SandboxSpec};
    let request = || {
        ExecRequest::new(
            "cat /etc/hostname >/dev/null; cd .",
            Duration::from_secs(30),
        )
    };
    let mut rows = Vec::new();
    for confined in [false, true] {
        let provider = LocalProvider::new()?.confined(confined);
        let ticking = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let ticker = tokio::spawn(longest_stall(Arc::clone(&ticking)));
        let run = measure(async {
            for i in 0..sandboxes {
                let sandbox = provider
                    .create(&format!("c{i}"), &SandboxSpec::default())
                    .await
                    .expect("create");
                for _ in 0..3 {
                    assert_eq!(sandbox.exec(request()).await.expect("exec").exit_code, 0);
                }
                sandbox
                    .kill_leftover_processes(&LeftoverRules::default())
                    .await
                    .expect("leftover scan");
                sandbox.teardown().await.expect("teardown");
            }
        })
        .await;
        ticking.store(false, std::sync::atomic::Ordering::Relaxed);
        let stall = ticker.await?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / sandboxes as f64;
        let stall_ms = stall.as_secs_f64() * 1e3;
        rows.push((
            confined,
            ms(run.cpu),
            ms(run.children),
            ms(run.wall),
            stall_ms,
        ));
    }
    println!("\nlocal sandbox life ({sandboxes} sandboxes, 3 commands each): ms per sandbox");
    println!(
        "{:>26} {:>10} {:>10} {:>10} {:>14}",
        "", "own cpu", "child cpu", "wall", "longest stall"
    );
    for (confined, own, child, wall, stall) in &rows {
        let name = if *confined { "confined" } else { "unconfined" };
        println!("{name:>26} {own:>10.3} {child:>10.3} {wall:>10.3} {stall:>14.1}");
    }
    Ok(())
}

/// The longest the async thread (one, as in the generated `main`) left a 1 ms timer late
/// while `ticking`: what every other session and rollout on it waits for at worst.
async fn longest_stall(ticking: Arc<std::sync::atomic::AtomicBool>) -> Duration {
    let tick = Duration::from_millis(1);
    let mut longest = Duration::ZERO;
    while ticking.load(std::sync::atomic::Ordering::Relaxed) {
        let asked = Instant::now();
        tokio::time::sleep(tick).await;
        longest = longest.max(asked.elapsed().saturating_sub(tick));
    }
    longest
}

async fn bare_http(url: &str, calls: usize, concurrency: usize) {
    let http = reqwest::Client::new();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 1, "temperature": 1.0});
    futures::stream::iter(0..calls)
        .map(|_| {
            let (http, body) = (&http, &body);
            async move {
                let r = http
                    .post(url)
                    .json(body)
                    .send()
                    .await
                    .expect("baseline request");
                let _: Value = r.json().await.expect("baseline body");
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
}

/// A runtime on this thread alone, as the generated `main` builds.
fn one_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The value after flag `name` on the command line.
fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> anyhow::Result<()> {
    if let Some(ms) = arg_value(live::SERVER_FLAG) {
        return live::scripted_server(Duration::from_millis(ms.parse()?));
    }
    if std::env::args().any(|a| a == "--live") {
        let levels = arg_value("--levels").unwrap_or_else(|| "256,1024,4096".into());
        let levels = levels
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<usize>, _>>()?;
        let think = arg_value("--think-ms").map_or(Ok(1000), |v| v.parse())?;
        return live::run(&levels, Duration::from_millis(think));
    }
    if std::env::args().any(|a| a == "--confinement") {
        let n = arg_value("--sandboxes").map_or(Ok(400), |v| v.parse())?;
        return one_thread()?.block_on(confinement_cost(n));
    }
    tokio::runtime::Runtime::new()?.block_on(overhead())
}

async fn overhead() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let server = ScriptedServer::start_with(policy, false).await?;
    let servers = [hermes_runtime::config::ApiServerConfig {
        base_url: Some(server.base_url()),
        ..Default::default()
    }];
    let config = Arc::new(hermes_runtime::config::HermesEnvConfig {
        max_agent_turns: 8,
        ..Default::default()
    });
    let tools = ToolRegistry::builtin()
        .resolve(Some(&["file".into(), "terminal".into()]), None)
        .map_err(anyhow::Error::msg)?
        .0;
    let rt = Runtime::builder(
        Arc::clone(&config),
        LlmClient::new(&servers, 8, RetryPolicy::default())?,
        Arc::new(LocalProvider::new()?),
        tools,
    )
    .build();
    let env = <Bench as hermes_env::EnvDefinition>::from_config(config, Default::default());
    let url = format!("{}/chat/completions", server.base_url());
    println!("framework overhead: {TURNS}-turn tool-calling rollouts, scripted server, zero model latency");
    println!(
        "machine: {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:>11} {:>9} {:>12} {:>14} {:>13} {:>15} {:>15} {:>16} {:>9} {:>8}",
        "concurrency",
        "rollouts",
        "rollouts/s",
        "cpu ms/rollout",
        "cpu ms/turn",
        "child ms/turn",
        "total ms/turn",
        "baseline ms/call",
        "ratio",
        "rss MB"
    );
    for concurrency in [1usize, 16, 128] {
        let rollouts = if quick {
            concurrency.max(16)
        } else {
            (concurrency * 8).max(128)
        };
        let item = Arc::new(Item { id: 0 });
        let mut peak = rss_mb();
        let run = measure(async {
            let results: Vec<_> = futures::stream::iter(0..rollouts)
                .map(|_| run_rollout(&env, &rt, &item, Split::Train))
                .buffer_unordered(concurrency)
                .collect()
                .await;
            assert!(results
                .iter()
                .all(|r| r.reward == 1.0 && r.run.turns_used as usize == TURNS));
            peak = peak.max(rss_mb());
        })
        .await;
        let calls = rollouts * TURNS;
        let base = measure(bare_http(&url, calls, concurrency)).await;
        let turn_ms = run.cpu.as_secs_f64() * 1e3 / calls as f64;
        let child_ms = run.children.as_secs_f64() * 1e3 / calls as f64;
        let total_ms = turn_ms + child_ms;
        let base_ms = base.cpu.as_secs_f64() * 1e3 / calls as f64;
        println!(
            "{concurrency:>11} {rollouts:>9} {:>12.1} {:>14.3} {turn_ms:>13.3} {child_ms:>15.3} {total_ms:>15.3} {base_ms:>16.3} {:>8.2}x {peak:>8.1}",
            rollouts as f64 / run.wall.as_secs_f64(),
            run.cpu.as_secs_f64() * 1e3 / rollouts as f64,
            turn_ms / base_ms.max(1e-9),
        );
    }
    println!("cpu = user+system time of this process, including the in-process scripted server;");
    println!(
        "child = user+system time of reaped children (the terminal tool's shell and commands);"
    );
    println!("baseline = one bare reqwest chat call per turn to the same server; ratio = framework/baseline cpu per turn");
    child_cpu_per_command(if quick { 200 } else { 1000 }).await?;
    // On one thread, as the generated `main` runs, so that a stall of it shows.
    let n = if quick { 100 } else { 400 };
    tokio::task::spawn_blocking(move || one_thread()?.block_on(confinement_cost(n))).await??;
    Ok(())
}
