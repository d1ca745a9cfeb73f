//go:build sluice_bridge

package internal

import "runtime"

// Raw imports. Every pointer and size is an i32 in the ABI; pointers to data
// the host only reads are passed as *byte so the GC keeps them alive for the
// duration of the call; pointers the host writes through are the globals of
// memory.go.

//go:wasmimport env proxy_log
func hostLog(level uint32, msg *byte, msgSize uint32) uint32

//go:wasmimport env proxy_send_local_response
func hostSendLocalResponse(status uint32, details *byte, detailsSize uint32, body *byte, bodySize uint32, headers *byte, headersSize uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_get_shared_data
func hostGetSharedData(key *byte, keySize uint32, retData *uint32, retSize *uint32, retCas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func hostSetSharedData(key *byte, keySize uint32, value *byte, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func hostRegisterSharedQueue(name *byte, nameSize uint32, retID *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func hostResolveSharedQueue(vmID *byte, vmIDSize uint32, name *byte, nameSize uint32, retID *uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func hostDequeueSharedQueue(queueID uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func hostEnqueueSharedQueue(queueID uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func hostGetHeaderMapValue(mapType uint32, key *byte, keySize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func hostAddHeaderMapValue(mapType uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func hostReplaceHeaderMapValue(mapType uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func hostRemoveHeaderMapValue(mapType uint32, key *byte, keySize uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func hostGetHeaderMapPairs(mapType uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func hostSetHeaderMapPairs(mapType uint32, data *byte, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func hostGetBufferBytes(bufferType uint32, start uint32, maxSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func hostSetBufferBytes(bufferType uint32, start uint32, maxSize uint32, data *byte, size uint32) uint32

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType uint32) uint32

//go:wasmimport env proxy_close_stream
func hostCloseStream(streamType uint32) uint32

//go:wasmimport env proxy_http_call
func hostHttpCall(upstream *byte, upstreamSize uint32, headers *byte, headersSize uint32, body *byte, bodySize uint32, trailers *byte, trailersSize uint32, timeoutMillis uint32, retCalloutID *uint32) uint32

//go:wasmimport env proxy_call_foreign_function
func hostCallForeignFunction(name *byte, nameSize uint32, param *byte, paramSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func hostSetTickPeriodMilliseconds(period uint32) uint32

//go:wasmimport env proxy_set_effective_context
func hostSetEffectiveContext(contextID uint32) uint32

//go:wasmimport env proxy_done
func hostDone() uint32

//go:wasmimport env proxy_define_metric
func hostDefineMetric(metricType uint32, name *byte, nameSize uint32, retID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(metricID uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func hostRecordMetric(metricID uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func hostGetMetric(metricID uint32, retValue *uint64) uint32

//go:wasmimport env proxy_get_property
func hostGetProperty(path *byte, pathSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_property
func hostSetProperty(path *byte, pathSize uint32, value *byte, valueSize uint32) uint32

// The functions below keep the signatures of the SDK's TinyGo declarations,
// so the rest of the SDK compiles unchanged against them.

func ProxyLog(logLevel LogLevel, messageData *byte, messageSize int) Status {
	st := hostLog(uint32(logLevel), messageData, uint32(messageSize))
	runtime.KeepAlive(messageData)
	return Status(st)
}

func ProxySendLocalResponse(statusCode uint32, statusCodeDetailData *byte, statusCodeDetailsSize int,
	bodyData *byte, bodySize int, headersData *byte, headersSize int, grpcStatus int32) Status {
	st := hostSendLocalResponse(statusCode, statusCodeDetailData, uint32(statusCodeDetailsSize),
		bodyData, uint32(bodySize), headersData, uint32(headersSize), grpcStatus)
	runtime.KeepAlive(statusCodeDetailData)
	runtime.KeepAlive(bodyData)
	runtime.KeepAlive(headersData)
	return Status(st)
}

func ProxyGetSharedData(keyData *byte, keySize int, returnValueData **byte, returnValueSize *int, returnCas *uint32) Status {
	outU32 = 0
	st := Status(hostGetSharedData(keyData, uint32(keySize), &outPtr, &outSize, &outU32))
	runtime.KeepAlive(keyData)
	*returnCas = outU32
	return takeReturned(st, returnValueData, returnValueSize)
}

func ProxySetSharedData(keyData *byte, keySize int, valueData *byte, valueSize int, cas uint32) Status {
	st := hostSetSharedData(keyData, uint32(keySize), valueData, uint32(valueSize), cas)
	runtime.KeepAlive(keyData)
	runtime.KeepAlive(valueData)
	return Status(st)
}

func ProxyRegisterSharedQueue(nameData *byte, nameSize int, returnID *uint32) Status {
	outU32 = 0
	st := hostRegisterSharedQueue(nameData, uint32(nameSize), &outU32)
	runtime.KeepAlive(nameData)
	*returnID = outU32
	return Status(st)
}

func ProxyResolveSharedQueue(vmIDData *byte, vmIDSize int, nameData *byte, nameSize int, returnID *uint32) Status {
	outU32 = 0
	st := hostResolveSharedQueue(vmIDData, uint32(vmIDSize), nameData, uint32(nameSize), &outU32)
	runtime.KeepAlive(vmIDData)
	runtime.KeepAlive(nameData)
	*returnID = outU32
	return Status(st)
}

func ProxyDequeueSharedQueue(queueID uint32, returnValueData **byte, returnValueSize *int) Status {
	st := Status(hostDequeueSharedQueue(queueID, &outPtr, &outSize))
	return takeReturned(st, returnValueData, returnValueSize)
}

func ProxyEnqueueSharedQueue(queueID uint32, valueData *byte, valueSize int) Status {
	st := hostEnqueueSharedQueue(queueID, valueData, uint32(valueSize))
	runtime.KeepAlive(valueData)
	return Status(st)
}

func ProxyGetHeaderMapValue(mapType MapType, keyData *byte, keySize int, returnValueData **byte, returnValueSize *int) Status {
	st := Status(hostGetHeaderMapValue(uint32(mapType), keyData, uint32(keySize), &outPtr, &outSize))
	runtime.KeepAlive(keyData)
	return takeReturned(st, returnValueData, returnValueSize)
}

func ProxyAddHeaderMapValue(mapType MapType, keyData *byte, keySize int, valueData *byte, valueSize int) Status {
	st := hostAddHeaderMapValue(uint32(mapType), keyData, uint32(keySize), valueData, uint32(valueSize))
	runtime.KeepAlive(keyData)
	runtime.KeepAlive(valueData)
	return Status(st)
}

func ProxyReplaceHeaderMapValue(mapType MapType, keyData *byte, keySize int, valueData *byte, valueSize int) Status {
	st := hostReplaceHeaderMapValue(uint32(mapType), keyData, uint32(keySize), valueData, uint32(valueSize))
	runtime.KeepAlive(keyData)
	runtime.KeepAlive(valueData)
	return Status(st)
}

func ProxyRemoveHeaderMapValue(mapType MapType, keyData *byte, keySize int) Status {
	st := hostRemoveHeaderMapValue(uint32(mapType), keyData, uint32(keySize))
	runtime.KeepAlive(keyData)
	return Status(st)
}

func ProxyGetHeaderMapPairs(mapType MapType, returnValueData **byte, returnValueSize *int) Status {
	st := Status(hostGetHeaderMapPairs(uint32(mapType), &outPtr, &outSize))
	return takeReturned(st, returnValueData, returnValueSize)
}

func ProxySetHeaderMapPairs(mapType MapType, mapData *byte, mapSize int) Status {
	st := hostSetHeaderMapPairs(uint32(mapType), mapData, uint32(mapSize))
	runtime.KeepAlive(mapData)
	return Status(st)
}

func ProxyGetBufferBytes(bufferType BufferType, start int, maxSize int, returnBufferData **byte, returnBufferSize *int) Status {
	st := Status(hostGetBufferBytes(uint32(bufferType), uint32(start), uint32(maxSize), &outPtr, &outSize))
	return takeReturned(st, returnBufferData, returnBufferSize)
}

func ProxySetBufferBytes(bufferType BufferType, start int, maxSize int, bufferData *byte, bufferSize int) Status {
	st := hostSetBufferBytes(uint32(bufferType), uint32(start), uint32(maxSize), bufferData, uint32(bufferSize))
	runtime.KeepAlive(bufferData)
	return Status(st)
}

func ProxyContinueStream(streamType StreamType) Status {
	return Status(hostContinueStream(uint32(streamType)))
}

func ProxyCloseStream(streamType StreamType) Status {
	return Status(hostCloseStream(uint32(streamType)))
}

func ProxyHttpCall(upstreamData *byte, upstreamSize int, headerData *byte, headerSize int,
	bodyData *byte, bodySize int, trailersData *byte, trailersSize int, timeout uint32, calloutIDPtr *uint32,
) Status {
	outU32 = 0
	st := hostHttpCall(upstreamData, uint32(upstreamSize), headerData, uint32(headerSize),
		bodyData, uint32(bodySize), trailersData, uint32(trailersSize), timeout, &outU32)
	runtime.KeepAlive(upstreamData)
	runtime.KeepAlive(headerData)
	runtime.KeepAlive(bodyData)
	runtime.KeepAlive(trailersData)
	*calloutIDPtr = outU32
	return Status(st)
}

func ProxyCallForeignFunction(funcNamePtr *byte, funcNameSize int, paramPtr *byte, paramSize int, returnData **byte, returnSize *int) Status {
	st := Status(hostCallForeignFunction(funcNamePtr, uint32(funcNameSize), paramPtr, uint32(paramSize), &outPtr, &outSize))
	runtime.KeepAlive(funcNamePtr)
	runtime.KeepAlive(paramPtr)
	return takeReturned(st, returnData, returnSize)
}

func ProxySetTickPeriodMilliseconds(period uint32) Status {
	return Status(hostSetTickPeriodMilliseconds(period))
}

func ProxySetEffectiveContext(contextID uint32) Status {
	return Status(hostSetEffectiveContext(contextID))
}

func ProxyDone() Status {
	return Status(hostDone())
}

func ProxyDefineMetric(metricType MetricType, metricNameData *byte, metricNameSize int, returnMetricIDPtr *uint32) Status {
	outU32 = 0
	st := hostDefineMetric(uint32(metricType), metricNameData, uint32(metricNameSize), &outU32)
	runtime.KeepAlive(metricNameData)
	*returnMetricIDPtr = outU32
	return Status(st)
}

func ProxyIncrementMetric(metricID uint32, offset int64) Status {
	return Status(hostIncrementMetric(metricID, offset))
}

func ProxyRecordMetric(metricID uint32, value uint64) Status {
	return Status(hostRecordMetric(metricID, value))
}

func ProxyGetMetric(metricID uint32, returnMetricValue *uint64) Status {
	outU64 = 0
	st := hostGetMetric(metricID, &outU64)
	*returnMetricValue = outU64
	return Status(st)
}

func ProxyGetProperty(pathData *byte, pathSize int, returnValueData **byte, returnValueSize *int) Status {
	st := Status(hostGetProperty(pathData, uint32(pathSize), &outPtr, &outSize))
	runtime.KeepAlive(pathData)
	return takeReturned(st, returnValueData, returnValueSize)
}

func ProxySetProperty(pathData *byte, pathSize int, valueData *byte, valueSize int) Status {
	st := hostSetProperty(pathData, uint32(pathSize), valueData, uint32(valueSize))
	runtime.KeepAlive(pathData)
	runtime.KeepAlive(valueData)
	return Status(st)
}
