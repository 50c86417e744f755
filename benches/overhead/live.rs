//! `-- --live`: thousands of live rollouts in one process. The same 4-turn rollouts as the
//! rest of this bench, with local sandboxes, but against a scripted server that thinks for a
//! second before each answer (`--think-ms`), so every rollout of a level is alive at once: 256,
//! 1,024 and 4,096 concurrent rollouts (`--levels`), each in its own scratch directory with its
//! own shell (a file write, two `terminal` commands, an answer: see [`live_policy`]). The server runs as a process of its own (this binary with `--scripted-server`),
//! so the figures are the framework's alone. The framework side runs on one thread, as the
//! generated binary does.
//!
//! Per level: rollouts done at reward 1.0, wall, CPU per LLM turn (own and children: the
//! shells), peak resident memory and its growth per rollout, peak threads (the blocking pool)
//! and open descriptors, and the server's CPU per turn.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// The flag that makes this binary the scripted server (its argument: think time in ms).
pub const SERVER_FLAG: &str = "--scripted-server";

/// The rest of the bench's rollouts with both reads and the rewrite as `terminal` commands:
/// the first runs without a shell, the second starts the sandbox's persistent shell, which then
/// lives until the rollout's sandbox is torn down (the shell per live rollout this measures).
fn live_policy(request: &Value) -> Reply {
    let turn = request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    match turn {
        0 => Reply::tool(
            "write_file",
            json!({"path": "notes.txt", "content": "first"}),
        ),
        1 => Reply::tool("terminal", json!({"command": "cat notes.txt"})),
        2 => Reply::tool("terminal", json!({"command": "printf second > notes.txt"})),
        _ => Reply::text("done"),
    }
}

/// The scripted server as a process of its own: prints its base URL, answers every request
/// after `think`, stops when its stdin closes.
pub fn scripted_server(think: Duration) -> anyhow::Result<()> {
    hermes_runtime::app::raise_descriptor_limit();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = ScriptedServer::start_with(live_policy, false).await?;
        server.set_delay(think);
        println!("{}", server.base_url());
        std::io::stdout().flush()?;
        tokio::task::spawn_blocking(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        })
        .await?;
        Ok(())
    })
}

/// User + system CPU time of process `pid` (`/proc/PID/stat`, clock ticks of 10 ms).
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields 14 and 15 (utime, stime); `after` starts at field 3.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A number from `/proc/self/status` (`VmRSS`, `Threads`, …).
fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Peaks seen while a level runs.
#[derive(Default, Clone, Copy)]
struct Peaks {
    rss_kb: u64,
    threads: u64,
    fds: u64,
    /// Child processes (the rollouts' shells) and their proportional set size.
    shells: u64,
    shells_pss_kb: u64,
    /// CPU time of the sampling thread itself, left out of the framework's.
    cpu: Duration,
}

/// This process's children (`/proc/self/task/*/children`).
fn children() -> Vec<u32> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    pids
}

fn pss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Samples this process every 50 ms and its children every 250 ms, on a thread of its own
/// whose CPU time is returned so it can be left out, until `stop`.
fn sample(stop: Arc<AtomicBool>, server: u32) -> std::thread::JoinHandle<Peaks> {
    std::thread::spawn(move || {
        let mut peaks = Peaks::default();
        let mut tick = 0u64;
        while !stop.load(Ordering::Relaxed) {
            peaks.rss_kb = peaks.rss_kb.max(status_field("VmRSS"));
            peaks.threads = peaks.threads.max(status_field("Threads"));
            peaks.fds = peaks.fds.max(open_descriptors());
            if tick.is_multiple_of(5) {
                let shells: Vec<u32> = children().into_iter().filter(|&p| p != server).collect();
                peaks.shells = peaks.shells.max(shells.len() as u64);
                let pss = shells.iter().map(|&p| pss_kb(p)).sum();
                peaks.shells_pss_kb = peaks.shells_pss_kb.max(pss);
            }
            tick += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        peaks.cpu = cpu_time_of(libc::RUSAGE_THREAD);
        peaks
    })
}

/// Runs the live levels against a scripted server process thinking `think` per turn.
pub fn run(levels: &[usize], think: Duration) -> anyhow::Result<()> {
    let limit = hermes_runtime::app::raise_descriptor_limit();
    let mut server = Command::new(std::env::current_exe()?)
        .args([SERVER_FLAG, &think.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout")).read_line(&mut line)?;
    let url = line.trim().to_owned();
    anyhow::ensure!(
        url.starts_with("http"),
        "the scripted server did not start: {line:?}"
    );
    println!(
        "live rollouts: {TURNS}-turn rollouts, local sandboxes, the model thinks {} ms per turn \
         (scripted server in its own process); {} cores; open-file limit {limit}",
        think.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:>9} {:>9} {:>8} {:>9} {:>13} {:>14} {:>13} {:>9} {:>11} {:>8} {:>6} {:>7} {:>9} {:>14}",
        "rollouts",
        "ok",
        "wall s",
        "turns/s",
        "own ms/turn",
        "child ms/turn",
        "all ms/turn",
        "peak MB",
        "KB/rollout",
        "threads",
        "fds",
        "shells",
        "shell MB",
        "server ms/turn"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server_pid = server.id();
    for &n in levels {
        rt.block_on(level(n, &url, server_pid))?;
    }
    drop(server.stdin.take());
    server.wait()?;
    println!("own = this process (one thread, as the generated binary); child = the rollouts' shells and their commands;");
    println!("KB/rollout = (peak RSS - RSS before the level) / rollouts; threads and fds are peaks (tokio's blocking pool, shells' pipes, connections);");
    println!(
        "shells = peak live child processes, shell MB their summed PSS (sampled every 250 ms)"
    );
    Ok(())
}

async fn level(n: usize, url: &str, server_pid: u32) -> anyhow::Result<()> {
    let servers = [hermes_runtime::config::ApiServerConfig {
        base_url: Some(url.to_owned()),
        // Every live rollout has its request in flight at once (the default, 512, would
        // queue the rest: a knob of the guide's scaling section).
        num_max_requests_at_once: n as i64,
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
        Arc::new(LocalProvider::new()?.confined(std::env::args().any(|a| a == "--confined"))),
        tools,
    )
    .build();
    let env = <Bench as hermes_env::EnvDefinition>::from_config(config, Default::default());
    let item = Arc::new(Item { id: 0 });
    let before_kb = status_field("VmRSS");
    let stop = Arc::new(AtomicBool::new(false));
    let server_cpu = cpu_of(server_pid);
    let (w, c, k) = (Instant::now(), cpu_time(), child_cpu_time());
    let sampler = sample(Arc::clone(&stop), server_pid);
    let results =
        futures::future::join_all((0..n).map(|_| run_rollout(&env, &rt, &item, Split::Train)))
            .await;
    let (wall, children) = (w.elapsed(), child_cpu_time() - k);
    stop.store(true, Ordering::Relaxed);
    let peaks = sampler.join().expect("sampler");
    let own = (cpu_time() - c).saturating_sub(peaks.cpu);
    let server_cpu = cpu_of(server_pid) - server_cpu;
    let ok = results
        .iter()
        .filter(|r| r.reward == 1.0 && r.run.turns_used as usize == TURNS)
        .count();
    if let Some(bad) = results
        .iter()
        .find(|r| !(r.reward == 1.0 && r.run.turns_used as usize == TURNS))
    {
        println!(
            "  first rollout not done: reward {}, {} turns, outcome {:?}",
            bad.reward, bad.run.turns_used, bad.outcome
        );
    }
    let turns = (n * TURNS) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / turns;
    println!(
        "{n:>9} {:>9} {:>8.1} {:>9.0} {:>13.3} {:>14.3} {:>13.3} {:>9.0} {:>11.0} {:>8} {:>6} {:>7} {:>9.0} {:>14.3}",
        format!("{ok}/{n}"),
        wall.as_secs_f64(),
        turns / wall.as_secs_f64(),
        ms(own),
        ms(children),
        ms(own + children),
        peaks.rss_kb as f64 / 1024.0,
        peaks.rss_kb.saturating_sub(before_kb) as f64 / n as f64,
        peaks.threads,
        peaks.fds,
        peaks.shells,
        peaks.shells_pss_kb as f64 / 1024.0,
        ms(server_cpu),
    );
    Ok(())
}
