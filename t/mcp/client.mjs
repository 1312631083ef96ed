// t/mcp/client.mjs - drive bin/isopod-mcp with the official MCP SDK client
// (pinned in package.json) over StdioClientTransport, for t/90-mcp.bats.
//
//   node client.mjs SCENARIO [JSON]
//
// Each run starts its own server: $MCP_SERVER (default ../../bin/isopod-mcp)
// with the arguments in $MCP_ARGS (a JSON array), the environment passed
// whole (ISOPOD_HOME, ISOPOD_NET...).  It prints one JSON object on stdout
// for the test to judge with jq; an unexpected failure exits 1.  The SDK
// validates each structuredContent against the tool's outputSchema (it
// caches them at tools/list), so a result that does not fit fails here.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const server = process.env.MCP_SERVER || path.join(here, '../../bin/isopod-mcp');
const serverArgs = JSON.parse(process.env.MCP_ARGS || '[]');
const [scenario, arg] = process.argv.slice(2);
const input = arg ? JSON.parse(arg) : {};
// a call's time limit: 10 min, or $MCP_CALL_TIMEOUT_MS (t/35's self-build)
const LONG = { timeout: Number(process.env.MCP_CALL_TIMEOUT_MS) || 600000 };
const logs = [];

async function connect() {
	const transport = new StdioClientTransport({
		command: server, args: serverArgs, env: { ...process.env }, stderr: 'inherit',
	});
	const client = new Client({ name: 'isopod-t90', version: '1' }, { capabilities: {} });
	client.fallbackNotificationHandler = async (n) => {
		if (n.method === 'notifications/message') logs.push(n.params);
	};
	await client.connect(transport);
	return { client, transport };
}

function out(o) {
	process.stdout.write(JSON.stringify(o) + '\n');
}

async function callOrError(client, name, args, opts) {
	try {
		const r = await client.callTool({ name, arguments: args }, undefined, opts || LONG);
		return { result: r };
	} catch (e) {
		return { error: { code: e.code, message: e.message, data: e.data } };
	}
}

async function runningVms(client) {
	const r = await client.callTool({ name: 'vm_list', arguments: {} });
	return r.structuredContent.vms.filter((v) => v.running).map((v) => v.id);
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

async function main() {
	const { client } = await connect();
	const tools = (await client.listTools()).tools;
	let res = {};
	switch (scenario) {
	case 'init':
		res = ({
			sdk_latest: LATEST_PROTOCOL_VERSION,
			server: client.getServerVersion(),
			capabilities: client.getServerCapabilities(),
			tools: tools.map((t) => ({
				name: t.name,
				input: t.inputSchema?.type ?? null,
				output: t.outputSchema?.type ?? null,
			})),
		});
		break;
	case 'call': // {name, args}: the result, or the JSON-RPC error
		res = (await callOrError(client, input.name, input.args));
		break;
	case 'concurrent': { // {args}: two calls at once; when each started and ended
		const t0 = Date.now();
		const one = async () => {
			const r = await callOrError(client, 'sandbox_run', input.args);
			return { end: Date.now() - t0, result: r.result, error: r.error };
		};
		const rs = await Promise.all([one(), one()]);
		res = ({ calls: rs });
		break;
	}
	case 'cancel': { // {args}: cancel once its VM runs; how long until none runs
		const ac = new AbortController();
		const p = callOrError(client, 'sandbox_run', input.args, { ...LONG, signal: ac.signal });
		let vms = [];
		const t0 = Date.now();
		while (Date.now() - t0 < 240000 && !(vms = await runningVms(client)).length)
			await sleep(200);
		const tc = Date.now();
		ac.abort('test cancel');
		const r = await p;
		let left = vms;
		while (Date.now() - tc < 20000 && (left = await runningVms(client)).length)
			await sleep(100);
		res = ({ running_before: vms, running_after: left, stop_ms: Date.now() - tc, aborted: r.error ?? null });
		break;
	}
	case 'close_running': { // {args}: once its VM runs, the client goes (stdin closed), no cancel
		const p = callOrError(client, 'sandbox_run', input.args);
		let vms = [];
		const t0 = Date.now();
		while (Date.now() - t0 < 240000 && !(vms = await runningVms(client)).length)
			await sleep(200);
		const tc = Date.now();
		await client.close();
		const r = await p;
		out({ running_before: vms, close_ms: Date.now() - tc, answer: r.result ?? r.error ?? null, logs });
		return;
	}
	case 'cancel_commit': { // {args} with commit_as: cancel once its stage exists
		const label = input.args.commit_as;
		const labels = async () => (await client.callTool({ name: 'stage_list', arguments: {} }))
			.structuredContent.stages.map((st) => st.label);
		const ac = new AbortController();
		const p = callOrError(client, 'sandbox_run', input.args, { ...LONG, signal: ac.signal });
		let seen = false;
		const t0 = Date.now();
		while (Date.now() - t0 < 240000 && !(seen = (await labels()).includes(label)))
			await sleep(200);
		ac.abort('test cancel');
		await p;
		const tc = Date.now();
		let kept = seen;
		while (Date.now() - tc < 20000 && (kept = (await labels()).includes(label)))
			await sleep(200);
		res = ({ seen, kept, running_after: await runningVms(client) });
		break;
	}
	case 'progress': { // {args}: a call asking for progress; what it heard
		const heard = [];
		const r = await callOrError(client, 'sandbox_run', input.args,
			{ ...LONG, onprogress: (p) => heard.push(p) });
		res = ({ heard, result: r.result, error: r.error });
		break;
	}
	case 'kept': { // keep a VM, vm_exec in it, stop it, remove it
		const run = await callOrError(client, 'sandbox_run', { ...input.args, keep: true });
		const vm = run.result?.structuredContent?.vm;
		const id = typeof vm === 'string' ? vm : vm?.id;
		const ex = await callOrError(client, 'vm_exec', { vm: id, argv: ['sh', '-c', 'echo in-$0; exit 4', 'kept'] });
		const ex2 = await callOrError(client, 'vm_exec', { vm: id, command: 'cat', stdin: 'fed' });
		// input.exec3: one more vm_exec's arguments, in the same VM
		const ex3 = input.exec3 ? await callOrError(client, 'vm_exec', { vm: id, ...input.exec3 }) : null;
		const stop = await callOrError(client, 'vm_stop', { vm: id });
		const rm = await callOrError(client, 'vm_rm', { vms: [id] });
		res = ({ id, run, exec: ex, exec2: ex2, exec3: ex3, stop, rm });
		break;
	}
	default:
		throw new Error(`unknown scenario ${scenario}`);
	}
	out({ ...res, logs });
	await client.close();
}

main().catch((e) => {
	process.stderr.write(`client.mjs: ${e.stack || e}\n`);
	process.exit(1);
});
