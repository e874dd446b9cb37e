// A task's MCP server over HTTP, on the official TypeScript SDK (as the image ships it): the
// tool get_code over streamable HTTP at /mcp (stateless: a server per request, JSON answers),
// and the tool get_word over SSE at /sse (the 2024-11-05 transport, posts to /messages).
// /healthz answers for the compose healthcheck.
const http = require("node:http");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { SSEServerTransport } = require("@modelcontextprotocol/sdk/server/sse.js");

const CODE = "otter-5150";
const WORD = "lantern";

function codes() {
  const s = new McpServer({ name: "codes", version: "1.0.0" });
  s.registerTool("get_code", { description: "Return the access code." },
    async () => ({ content: [{ type: "text", text: CODE }] }));
  return s;
}

function words() {
  const s = new McpServer({ name: "words", version: "1.0.0" });
  s.registerTool("get_word", { description: "Return the pass word." },
    async () => ({ content: [{ type: "text", text: WORD }] }));
  return s;
}

function body(req) {
  return new Promise((resolve, reject) => {
    let data = "";
    req.setEncoding("utf8");
    req.on("data", (c) => { data += c; });
    req.on("end", () => { try { resolve(data ? JSON.parse(data) : undefined); } catch (e) { reject(e); } });
    req.on("error", reject);
  });
}

const sessions = new Map(); // SSE session id -> transport

http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://localhost");
  try {
    if (url.pathname === "/healthz") {
      res.end("ok");
    } else if (url.pathname === "/mcp") {
      const server = codes();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on("close", () => { transport.close(); server.close(); });
      await server.connect(transport);
      await transport.handleRequest(req, res, req.method === "POST" ? await body(req) : undefined);
    } else if (url.pathname === "/sse" && req.method === "GET") {
      const transport = new SSEServerTransport("/messages", res);
      sessions.set(transport.sessionId, transport);
      res.on("close", () => sessions.delete(transport.sessionId));
      await words().connect(transport);
    } else if (url.pathname === "/messages" && req.method === "POST") {
      const transport = sessions.get(url.searchParams.get("sessionId"));
      if (!transport) {
        res.writeHead(404).end("no such session");
        return;
      }
      await transport.handlePostMessage(req, res, await body(req));
    } else {
      res.writeHead(404).end("not found");
    }
  } catch (e) {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  }
}).listen(8000, "0.0.0.0");
